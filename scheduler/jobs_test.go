package scheduler

import (
	"testing"
	"time"
)

// TestIntervalTicks: an interval job's tick (NewJobs, "@every d") is the
// interval it starts in, since the epoch, in any zone and before the
// epoch; a spec that is no whole number of milliseconds is refused.
func TestIntervalTicks(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	r, err := newJob(newMemLocks().client(), "j", "@every 10s", defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for now, want := range map[string]string{
		"2026-11-28T10:00:00Z":        "2026-11-28T10:00:00Z",
		"2026-11-28T10:00:09.999Z":    "2026-11-28T10:00:00Z",
		"2026-11-28T10:00:10Z":        "2026-11-28T10:00:10Z",
		"1969-12-31T23:59:55Z":        "1969-12-31T23:59:50Z",
		"2026-11-28T10:00:05.5+01:00": "2026-11-28T09:00:00Z",
	} {
		ev, ok := r.tickOf(at(now))
		if !ok || !ev.Tick.Equal(at(want)) {
			t.Errorf("interval tick of %s = %s %v, want %s", now, ev.Tick, ok, want)
		}
	}
	for _, spec := range []string{"@every 500us", "@every 1500us", "@every x"} {
		if _, err := newJob(newMemLocks().client(), "j", spec, defaultConfig()); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
}
