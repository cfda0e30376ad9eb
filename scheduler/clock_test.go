package scheduler

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A replica warns once when its clock offset to a lock node goes above
// half the skew (measured through the tick clock, so withClock counts),
// once when it is back, and hands every measurement to the observer; at
// most one measurement a minute.
func TestClockOffsetIsMeasuredAndWarned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := capture{recs: make(chan slog.Record, 1000)}
		client := newMemLocks().client()
		var mu sync.Mutex
		var seen []time.Duration
		shift := 0 * time.Millisecond
		clock := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return time.Now().Add(shift)
		}
		s := newTestScheduler(t, client, WithLogger(slog.New(logs)), withClock(clock), withReplica("r1"),
			WithObserver(func(e Event) {
				if e.Outcome != OutcomeClock {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, e.Offset)
			}))
		if err := s.Register("j", "* * * * * *", nop); err != nil {
			t.Fatal(err)
		}
		client.nodeOffset.Store(int64(400 * time.Millisecond)) // under half the 1s skew
		s.Start()
		time.Sleep(30 * time.Second)
		client.nodeOffset.Store(int64(-600 * time.Millisecond)) // node behind: above half
		time.Sleep(2 * time.Minute)
		mu.Lock()
		shift = -700 * time.Millisecond // this replica's clock behind by as much: back to 100ms
		mu.Unlock()
		time.Sleep(time.Minute)
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		want := []time.Duration{400 * time.Millisecond, -600 * time.Millisecond, -600 * time.Millisecond, 100 * time.Millisecond}
		if len(got) != len(want) {
			t.Fatalf("measurements %v, want %v (one a minute)", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("measurements %v, want %v", got, want)
			}
		}
		warns, infos := clockLogs(logs)
		if len(warns) != 1 || !strings.Contains(warns[0], "node=mem:1 offset=-600ms replica=r1") {
			t.Fatalf("want one Warn naming node, offset and replica, got %q", warns)
		}
		if len(infos) != 1 || !strings.Contains(infos[0], "back within") {
			t.Fatalf("want one Info when back within half the skew, got %q", infos)
		}
	})
}

// clockLogs returns the clock offset lines logged at Warn and Info.
func clockLogs(logs capture) (warns, infos []string) {
	for len(logs.recs) > 0 {
		r := <-logs.recs
		if !strings.Contains(r.Message, "clock offset") {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		line := r.Message + " node=" + attrs["node"] + " offset=" + attrs["offset"] + " replica=" + attrs["replica"]
		switch r.Level {
		case slog.LevelWarn:
			warns = append(warns, line)
		case slog.LevelInfo:
			infos = append(infos, line)
		}
	}
	return warns, infos
}
