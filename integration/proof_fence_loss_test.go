package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestProofFenceSurvivesOneNodesDataLoss: real nodes, node A's wall clock
// 10s ahead of the others' (libfaketime), so a counter seeded on A is 10s of
// microseconds above one seeded elsewhere. With 3 nodes: a fence taken on
// {A, B} while C is unreachable would be carried by A and B only; B then
// restarts without data (after the TTL: the delayed-restart rule), A becomes
// unreachable and C reachable, and a fence taken on {B, C} seeds from their
// clocks, below the first. Only one node lost data, so no fence may go
// backwards: each fenced acquisition either gets a larger fence or is
// refused (ErrQuorum). With 5 nodes the same faults (E the one unreachable
// first) must leave fencing available and growing.
func TestProofFenceSurvivesOneNodesDataLoss(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", n), func(t *testing.T) {
			fenceAfterDataLoss(t, n)
		})
	}
}

// fenceAfterDataLoss runs the scenario on n nodes and records its row.
func fenceAfterDataLoss(t *testing.T, n int) {
	const ttl, ahead = time.Second, 10 * time.Second
	c := redistest.StartClockCluster(t, n)
	a, b, last := c.Nodes[0], c.Nodes[1], c.Nodes[n-1]
	if err := a.SetClockOffset(ahead); err != nil {
		t.Fatal(err)
	}
	// Unreachable nodes refuse connections, so nothing waits on them: the
	// generous node timeout only has to survive a loaded machine.
	opt := redlock.WithNodeTimeout(300 * time.Millisecond)
	ctx := within(t, time.Minute)
	var notes []string
	backwards, ops, refused := 0, 0, 0
	// take takes the fence with a fresh client (another process); a
	// refusal must be ErrQuorum naming the fence's copies.
	take := func(what string) (int64, bool) {
		t.Helper()
		l, err := lockClient(t, c, opt).TryAcquire(ctx, "r", ttl, redlock.WithFencing())
		if err != nil {
			if !errors.Is(err, redlock.ErrQuorum) || !strings.Contains(err.Error(), "data loss") {
				t.Fatalf("fenced acquisition %s: %v, want a fence or ErrQuorum naming the fence's copies", what, err)
			}
			refused++
			notes = append(notes, what+": refused")
			return 0, false
		}
		ops++
		notes = append(notes, fmt.Sprintf("%s: fence %d", what, l.Fence()))
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		return l.Fence(), true
	}
	// afterLoss restarts B empty after the TTL, swaps A for the last node
	// and takes the fence again.
	afterLoss := func(first int64) {
		t.Helper()
		if err := b.Restart(ttl + 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		a.Refuse()
		last.Heal()
		defer a.Heal()
		f, ok := take("after B's data loss, A unreachable")
		if ok && f <= first {
			backwards++
			t.Errorf("fence went backwards after one node's data loss: %d after %d (%.1fs of microseconds below)",
				f, first, float64(first-f)/1e6)
		}
		if !ok && n > 3 {
			t.Errorf("fencing unavailable with one of %d nodes unreachable", n)
		}
	}

	last.Refuse()
	if first, ok := take("last node unreachable"); ok {
		afterLoss(first)
	} else if n > 3 {
		t.Fatalf("fencing unavailable with one of %d nodes unreachable", n)
	}
	last.Heal()
	first, ok := take("every node reachable")
	if !ok {
		t.Fatal("fencing unavailable with every node reachable")
	}
	afterLoss(first)

	report.Add(Row{
		Scenario: fmt.Sprintf("fenced: %d nodes, node A's clock 10s ahead, 1 resource", n),
		Fault:    "node B restarted without data (after the TTL), then A unreachable",
		Ops:      ops, Violations: backwards,
		Notes: fmt.Sprintf("%s; %d acquisitions refused (a fence is issued only once N−q+2 = %d of %d nodes carry it: then every later quorum meets one of them after any one node's data loss)",
			strings.Join(notes, "; "), refused, min(n, n-n/2+1), n),
	})
}
