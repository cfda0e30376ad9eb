package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// With WithCatchUp, a tick missed while every replica was down runs once,
// late, on the first replica back; a replica that comes back later, or
// while others ran the tick, does not run it again; of several missed
// ticks only the latest within the deadline runs. The control, without
// catch-up, loses the missed tick: the check can fail.
func TestCatchUpRunsTheLatestMissedTickOnce(t *testing.T) {
	for _, catchUp := range []bool{true, false} {
		t.Run(map[bool]string{true: "catch-up", false: "control"}[catchUp], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkCatchUp(t, catchUp) })
		})
	}
}

func checkCatchUp(t *testing.T, catchUp bool) {
	t0 := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
	locks := newMemLocks()
	rec := &recorder{}
	opts := []Option{WithObserver(rec.observe)}
	if catchUp {
		opts = append(opts, WithCatchUp(30*time.Second))
	}
	start := func(i int) *Scheduler {
		s := newTestScheduler(t, locks.client(), opts...)
		if err := s.Register("daily", "*/10 * * * * *", rec.job(i, 0)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		return s
	}
	stop := func(ss ...*Scheduler) {
		for _, s := range ss {
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := start(0), start(1)
	at(15 * time.Second) // tick 10 ran
	stop(a, b)           // a full outage across tick 20
	at(25 * time.Second)
	a = start(2) // catches tick 20 up
	at(26 * time.Second)
	b = start(3) // finds it run
	at(32 * time.Second)
	c := start(4) // a rolling restart after tick 30 ran: nothing to catch up
	at(35 * time.Second)
	stop(a, b, c) // outage across ticks 40, 50, 60
	at(62 * time.Second)
	a = start(5)
	at(65 * time.Second)
	stop(a)
	checkCaughtUp(t, rec, t0, catchUp)
	time.Sleep(time.Minute) // let the records expire
}

// checkCaughtUp checks the runs of checkCatchUp's scenario.
func checkCaughtUp(t *testing.T, rec *recorder, t0 time.Time, catchUp bool) {
	got := rec.perTick()
	// The first start counts as the end of an outage too: tick 0 (the
	// start's own second, which cron does not fire) is caught up.
	want := map[int]int{0: 1, 10: 1, 20: 1, 30: 1, 40: 0, 50: 0, 60: 1}
	if !catchUp {
		want[0], want[20], want[60] = 0, 0, 0
	}
	for sec, n := range want {
		if tick := t0.Add(time.Duration(sec) * time.Second).UTC(); got[tick] != n {
			t.Errorf("tick +%ds ran %d times, want %d (runs %v)", sec, got[tick], n, got)
		}
	}
	caught := rec.eventsOf(OutcomeLate)
	if !catchUp {
		if len(caught) != 0 {
			t.Fatalf("caught up without WithCatchUp: %+v", caught)
		}
		return
	}
	if len(caught) != 3 || caught[1].Duration != 5*time.Second || caught[2].Duration != 2*time.Second {
		t.Fatalf("want three late (caught up) events, the last two 5s and 2s late, got %+v", caught)
	}
	for _, e := range caught {
		if !errors.Is(e.Err, errCaughtUp) || e.level() != slog.LevelWarn {
			t.Fatalf("a caught-up run is late for errCaughtUp, at Warn: %+v", e)
		}
	}
	for _, r := range rec.runs() {
		if tick := r.tick.Sub(t0); tick == 20*time.Second && r.replica != 2 || tick == 60*time.Second && r.replica != 5 {
			t.Errorf("tick +%v ran on replica %d, want the first one back", tick, r.replica)
		}
	}
}
