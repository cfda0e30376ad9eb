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
		m := newMW(nil, nil, defaultConfig())
		if d := m.delay("r"); d < paceMinDelay || d > paceMinDelay+paceFirstHold {
			t.Fatalf("first delay %v without a measured hold", d)
		}
		m = newMW(nil, nil, defaultConfig())
		for range 20 {
			m.ranFor("r", 100*time.Millisecond)
		}
		var last time.Duration
		for i := range 10 {
			d := m.delay("r")
			lo := time.Duration(i+1) * 100 * time.Millisecond
			if d < lo || d >= lo+100*time.Millisecond {
				t.Fatalf("conflict %d: delay %v, want in [%v, %v)", i, d, lo, lo+100*time.Millisecond)
			}
			if d <= last-100*time.Millisecond {
				t.Fatalf("delays not increasing: %v after %v", d, last)
			}
			last = d
		}
		if d := m.delay("other"); d > paceMinDelay+paceFirstHold {
			t.Fatalf("an idle resource inherited another's queue: %v", d)
		}
		// Once the slots are in the past, the queue is empty again.
		time.Sleep(2 * time.Second)
		if d := m.delay("r"); d >= 200*time.Millisecond {
			t.Fatalf("delay %v after the queue drained", d)
		}
		if d := m.delay("x"); d > paceMaxDelay {
			t.Fatal("delay above the cap")
		}
	})
}

// TestPacerForgetsIdleResources: a contended resource's pace is kept while
// it matters and dropped once idle for idleKeep, without a scan.
func TestPacerForgetsIdleResources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMW(nil, nil, defaultConfig())
		for i := range 1024 {
			m.delay(string(rune('a'+i%26)) + time.Duration(i).String())
		}
		if n := len(m.res); n != 1024 {
			t.Fatalf("%d contended resources kept, want 1024 (their slots matter for a minute)", n)
		}
		time.Sleep(2 * idleKeep)
		for range 1024 / expirePerCall {
			m.delay("new")
			m.ranFor("new", time.Millisecond)
		}
		if n := len(m.res); n > 1 {
			t.Fatalf("%d idle resources kept", n)
		}
	})
}
