package middleware

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestPacerSpacesRequeuedTasks: successive conflicts on one resource get
// slots one typical hold time apart, so requeued tasks return about as fast
// as the resource serves them; other resources are paced on their own.
func TestPacerSpacesRequeuedTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pacer
		if d := p.delay("r"); d < paceMinDelay || d > paceMinDelay+paceFirstHold {
			t.Fatalf("first delay %v without a measured hold", d)
		}
		p = pacer{}
		for range 20 {
			p.held("r", 100*time.Millisecond)
		}
		var last time.Duration
		for i := range 10 {
			d := p.delay("r")
			lo := time.Duration(i+1) * 100 * time.Millisecond
			if d < lo || d >= lo+100*time.Millisecond {
				t.Fatalf("conflict %d: delay %v, want in [%v, %v)", i, d, lo, lo+100*time.Millisecond)
			}
			if d <= last-100*time.Millisecond {
				t.Fatalf("delays not increasing: %v after %v", d, last)
			}
			last = d
		}
		if d := p.delay("other"); d > paceMinDelay+paceFirstHold {
			t.Fatalf("an idle resource inherited another's queue: %v", d)
		}
		// Once the slots are in the past, the queue is empty again.
		time.Sleep(2 * time.Second)
		if d := p.delay("r"); d >= 200*time.Millisecond {
			t.Fatalf("delay %v after the queue drained", d)
		}
		if d := p.delay("x"); d > paceMaxDelay {
			t.Fatal("delay above the cap")
		}
	})
}

func TestPacerForgetsIdleResources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pacer
		for i := range paceSweepAt {
			p.delay(string(rune('a'+i%26)) + time.Duration(i).String())
		}
		time.Sleep(2 * paceForgetting)
		p.delay("new")
		if len(p.m) > 1 {
			t.Fatalf("%d idle resources kept", len(p.m))
		}
	})
}
