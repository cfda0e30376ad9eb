package transport

import (
	"testing"
	"time"
)

// TestBatchWindowKeepsDeadlines: no call is held back closer than one
// window to its deadline.
func TestBatchWindowKeepsDeadlines(t *testing.T) {
	const window = 10 * time.Millisecond
	n := &Node{Window: window}
	now := time.Now()
	end := now.Add(window)
	if got := n.lingerEnd(end, &Call{Deadline: now.Add(50 * time.Millisecond)}); !got.Equal(end) {
		t.Fatalf("a far deadline moved the end to %v", got.Sub(now))
	}
	if got := n.lingerEnd(end, &Call{Deadline: now.Add(15 * time.Millisecond)}); !got.Equal(now.Add(5 * time.Millisecond)) {
		t.Fatalf("a deadline 15ms away: end %v after now, want 5ms", got.Sub(now))
	}
	if got := n.lingerEnd(end, &Call{Deadline: now, Cleanup: true}); !got.Equal(end) {
		t.Fatalf("a cleanup call moved the end to %v", got.Sub(now))
	}
}
