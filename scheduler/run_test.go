package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// naive is the usual cron lock: lock the tick, run, release at once.
func naive(locks locker, skew time.Duration, job func()) cron.Job {
	return cron.FuncJob(func() {
		tick := time.Now().Round(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), skew/4)
		l, err := locks.Acquire(ctx, "naive:"+tick.String(), 5*time.Second)
		cancel()
		if err != nil {
			return
		}
		job()
		_ = l.Release(context.Background())
	})
}

// Three replicas fire every tick 200ms early, on time and 300ms late; a 0ms
// job still runs exactly once per tick. The naive lock, released right
// after the job, runs every tick more than once: the check can fail.
func TestSingletonEachTickOnceAcrossSkewedReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		rec := &recorder{}
		naiveRuns := map[time.Time]int{}
		var crons []*cron.Cron
		for i, shift := range []time.Duration{-200 * time.Millisecond, 0, 300 * time.Millisecond} {
			crons = append(crons, startReplica(t, locks.client(), "report", Every(time.Second), rec.job(i, 0), shift,
				WithSkew(500*time.Millisecond), WithObserver(rec.observe)))
			c := cron.New()
			client := locks.client()
			c.Schedule(shifted{Every(time.Second), shift}, naive(client, 500*time.Millisecond, func() {
				naiveRuns[time.Now().Round(time.Second).UTC()]++ // one goroutine at a time: runs never overlap in a bubble step
			}))
			c.Start()
			crons = append(crons, c)
		}
		time.Sleep(12*time.Second + 500*time.Millisecond)
		stopCrons(crons...)

		got := rec.perTick()
		for tick, n := range got {
			if n != 1 {
				t.Errorf("tick %s ran %d times", tick.Format(time.TimeOnly), n)
			}
		}
		for _, tick := range ticks(t0, 12) {
			if got[tick] != 1 {
				t.Errorf("tick %s ran %d times, want 1", tick.Format(time.TimeOnly), got[tick])
			}
			if naiveRuns[tick] < 2 {
				t.Errorf("naive lock: tick %s ran %d times; expected the late replica to run it again", tick.Format(time.TimeOnly), naiveRuns[tick])
			}
		}
		if n := rec.count(OutcomeSkippedOtherReplica); n < 24 {
			t.Errorf("%d skipped_other_replica events, want 2 per tick", n)
		}
		if n := rec.count(OutcomeSkippedBeyondSkew); n != 0 {
			t.Errorf("%d runs not attributed to a tick", n)
		}
		time.Sleep(2 * time.Second) // let the tick locks go
	})
}

// A replica later than the skew does not run the tick and says why.
func TestRunLaterThanSkewIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		c := startReplica(t, newMemLocks().client(), "late", Every(time.Second), rec.job(0, 0), 600*time.Millisecond,
			WithSkew(500*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(3 * time.Second)
		stopCrons(c)
		if len(rec.runs()) != 0 {
			t.Fatalf("a run 600ms late with a 500ms skew ran: %v", rec.runs())
		}
		evs := rec.eventsOf(OutcomeSkippedBeyondSkew)
		if len(evs) == 0 || !errors.Is(evs[0].Err, errNoTick) || !evs[0].Tick.IsZero() {
			t.Fatalf("want skipped_beyond_skew events without a tick (errNoTick), got %+v", rec.events)
		}
	})
}

// A tick lock won later than max(skew, 250ms) after the run started is
// given up: an earlier winner may already have run the tick and let it go.
func TestTickWonTooLateIsNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		locks := newMemLocks()
		slow := locks.client()
		slow.latency = 350 * time.Millisecond
		rec := &recorder{}
		c := startReplica(t, slow, "slow", Every(time.Second), rec.job(0, 0), 0, WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(1500 * time.Millisecond)
		stopCrons(c)
		if len(rec.runs()) != 0 {
			t.Fatal("a tick won 350ms after its start ran with a 300ms margin")
		}
		evs := rec.eventsOf(OutcomeLockError)
		if len(evs) != 1 || !strings.Contains(evs[0].Err.Error(), "won 350ms after") {
			t.Fatalf("want a lock error saying the tick was won too late, got %+v", rec.events)
		}
		if locks.held(tickResource("slow", evs[0].Tick)) {
			t.Fatal("the tick lock won too late should be released at once")
		}
	})
}

// A won tick is not released after its run: its lock is the tick's record
// and expires with its TTL, max(ttl, 2·skew + 2·margin, 9/10 of the
// interval).
func TestTickIsRememberedForItsRecordTTL(t *testing.T) {
	for _, tt := range []struct {
		name  string
		sched cron.Schedule
		keep  time.Duration
	}{
		{"ttl", Every(time.Second), 5 * time.Second},                      // the default running-lock TTL
		{"window", Every(time.Second), 2*2*time.Second + 2*2*time.Second}, // skew 2s: 8s
		{"interval", Every(20 * time.Second), 18 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				locks := newMemLocks()
				skew := 400 * time.Millisecond
				if tt.name == "window" {
					skew = 2 * time.Second
				}
				c := startReplica(t, locks.client(), "r", tt.sched, Func(nop), 0, WithSkew(skew))
				defer stopCrons(c)
				tick := tt.sched.Next(t0)
				res := tickResource("r", tick)
				time.Sleep(time.Until(tick.Add(tt.keep - 10*time.Millisecond)))
				if !locks.held(res) {
					t.Fatalf("tick record gone before %v", tt.keep)
				}
				time.Sleep(20 * time.Millisecond)
				if locks.held(res) {
					t.Fatalf("tick record still held after %v", tt.keep)
				}
				if locks.held(runningResource("r")) {
					t.Fatal("running lock held after a 0ms job")
				}
			})
		})
	}
}

// A job of 2.5 intervals never overlaps itself, across replicas; with
// the default policy the ticks it covers are skipped, each tick at most once.
func TestLongJobSkipsTicksItCovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		rec := &recorder{}
		var crons []*cron.Cron
		for i := range 3 {
			crons = append(crons, startReplica(t, locks.client(), "long", Every(time.Second), rec.job(i, 2500*time.Millisecond), 0,
				WithSkew(300*time.Millisecond), WithObserver(rec.observe)))
		}
		time.Sleep(12*time.Second + 100*time.Millisecond)
		stopCrons(crons...)
		if n := rec.overlaps.Load(); n != 0 {
			t.Fatalf("%d overlapping runs", n)
		}
		var started []int
		for _, s := range rec.runs() {
			started = append(started, int(s.tick.Sub(t0)/time.Second))
		}
		if want := []int{1, 4, 7, 10}; !equalInts(started, want) {
			t.Fatalf("ticks run %v, want %v", started, want)
		}
		if n := rec.count(OutcomeSkippedOverlap); n != 8 {
			t.Fatalf("%d skipped_overlap events, want 8 (ticks 2,3,5,6,8,9,11,12)", n)
		}
		time.Sleep(2 * time.Second)
	})
}

// With WithDelayIfRunning a tick waits for the previous run (bounded) and then
// runs right after it, still once; ticks that waited in vain are skipped.
func TestLongJobDelaysNextTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		locks := newMemLocks()
		rec := &recorder{}
		var crons []*cron.Cron
		for i := range 3 {
			crons = append(crons, startReplica(t, locks.client(), "long", Every(time.Second), rec.job(i, 2500*time.Millisecond), 0,
				WithSkew(300*time.Millisecond), WithDelayIfRunning(1200*time.Millisecond), WithObserver(rec.observe)))
		}
		time.Sleep(12*time.Second + 100*time.Millisecond)
		stopCrons(crons...)
		if n := rec.overlaps.Load(); n != 0 {
			t.Fatalf("%d overlapping runs", n)
		}
		runs := rec.runs()
		for tick, n := range rec.perTick() {
			if n > 1 {
				t.Errorf("tick %s ran %d times", tick.Format(time.TimeOnly), n)
			}
		}
		if len(runs) < 4 {
			t.Fatalf("%d runs in 12s, want at least 4", len(runs))
		}
		for i := 1; i < len(runs); i++ {
			if gap := runs[i].start.Sub(runs[i-1].end); gap < 0 || gap > 10*time.Millisecond {
				t.Errorf("run %d started %v after the previous one ended; a delayed run should follow at once", i, gap)
			}
		}
		delayed := rec.eventsOf(OutcomeLate)
		if len(delayed) < 2 {
			t.Fatalf("%d delayed events, want several", len(delayed))
		}
		for _, e := range delayed {
			if e.Duration <= 0 || e.Duration > 1200*time.Millisecond || !errors.Is(e.Err, errWaited) {
				t.Errorf("delayed %v (%v), want within (0, 1.2s], for errWaited", e.Duration, e.Err)
			}
		}
		if rec.count(OutcomeSkippedOverlap) == 0 {
			t.Error("no tick gave up waiting, though the job is 2.5 intervals long and the max delay 1.2s")
		}
		time.Sleep(2 * time.Second)
	})
}

// The job's context is cancelled with cause ErrLockLost when its running
// lock is lost, and the run is reported as failed.
func TestLockLossCancelsTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		locks := newMemLocks()
		rec := &recorder{}
		c := startReplica(t, locks.client(), "j", Every(10*time.Second), rec.job(0, time.Minute), 0,
			WithTTL(900*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		locks.drop(runningResource("j"))
		time.Sleep(500 * time.Millisecond) // keep-alive runs every ttl/3
		runs := rec.runs()
		if len(runs) != 1 || !errors.Is(runs[0].cause, redlock.ErrLockLost) {
			t.Fatalf("want one run ended by ErrLockLost, got %+v", runs)
		}
		failed := rec.eventsOf(OutcomeFailed)
		if len(failed) != 1 || !errors.Is(failed[0].Err, redlock.ErrLockLost) {
			t.Fatalf("want a failed event matching ErrLockLost, got %+v", rec.events)
		}
		stopCrons(c)
		time.Sleep(5 * time.Second)
	})
}

// A replica that dies in the middle of a run (its locks are no longer
// extended) loses its lock within the TTL, and the following ticks run on
// the other replicas, never overlapping the dead one's run.
func TestDeadReplicaHandsOverLaterTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		rec := &recorder{}
		clients := []*memClient{locks.client(), locks.client(), locks.client()}
		var crons []*cron.Cron
		for i, cl := range clients {
			crons = append(crons, startReplica(t, cl, "long", Every(time.Second), rec.job(i, 30*time.Second), 0,
				WithSkew(300*time.Millisecond), WithTTL(time.Second), WithObserver(rec.observe)))
		}
		time.Sleep(1500 * time.Millisecond)
		first := rec.inside.Load()
		if first != 1 {
			t.Fatalf("%d runs in progress, want 1", first)
		}
		// Who runs it? The replica whose client holds the running lock.
		locks.mu.Lock()
		holder := locks.keys[runningResource("long")].c
		locks.mu.Unlock()
		dead := -1
		for i, cl := range clients {
			if cl == holder {
				dead = i
			}
		}
		holder.dead.Store(true)
		time.Sleep(3 * time.Second)
		runs := rec.runs()
		if len(runs) != 1 || runs[0].replica != dead || !errors.Is(runs[0].cause, redlock.ErrLockLost) {
			t.Fatalf("want the dead replica's run ended by ErrLockLost, got %+v", runs)
		}
		if lost := runs[0].end.Sub(t0); lost > 2500*time.Millisecond+time.Second {
			t.Fatalf("loss noticed at +%v, more than a TTL after the death at +1.5s", lost)
		}
		if rec.inside.Load() != 1 {
			t.Fatal("no replica took over the following ticks")
		}
		stopCrons(crons...)
		runs = rec.runs()
		if len(runs) != 2 || runs[1].replica == dead || runs[1].start.Before(runs[0].end) {
			t.Fatalf("want a second run on another replica after the first ended, got %+v", runs)
		}
		if n := rec.overlaps.Load(); n != 0 {
			t.Fatalf("%d overlapping runs", n)
		}
		time.Sleep(3 * time.Second)
	})
}

// A panicking job is reported with its stack and the next tick runs.
func TestPanicIsRecoveredAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		calls := 0
		job := Func(func(ctx context.Context) error {
			calls++
			if calls == 1 {
				panic("boom")
			}
			return nil
		})
		c := startReplica(t, newMemLocks().client(), "p", Every(time.Second), job, 0, WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(2*time.Second + 100*time.Millisecond)
		stopCrons(c)
		if calls != 2 {
			t.Fatalf("job called %d times, want 2: the tick after the panic must run", calls)
		}
		p := rec.eventsOf(OutcomeFailed)
		var pe *panicError
		if len(p) != 1 || !errors.As(p[0].Err, &pe) || pe.value != "boom" || !strings.Contains(string(pe.stack), "run_test.go") {
			t.Fatalf("want one failed event with the panic value and stack, got %+v", rec.events)
		}
		if rec.count(OutcomeRan) != 1 {
			t.Fatalf("want the second tick reported as ran, got %+v", rec.events)
		}
		time.Sleep(time.Second)
	})
}

// A plain cron.Job runs too (without a context); its panic is recovered.
func TestPlainCronJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		calls := 0
		c := startReplica(t, newMemLocks().client(), "plain", Every(time.Second), cron.FuncJob(func() {
			calls++
			if calls == 2 {
				panic(errors.New("plain boom"))
			}
		}), 0, WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(3*time.Second + 100*time.Millisecond)
		stopCrons(c)
		if calls != 3 || rec.count(OutcomeRan) != 2 || rec.count(OutcomeFailed) != 1 {
			t.Fatalf("calls %d, events %+v", calls, rec.events)
		}
		var pe *panicError
		if ev := rec.eventsOf(OutcomeFailed)[0]; !errors.As(ev.Err, &pe) || pe.Unwrap() == nil {
			t.Fatalf("panic with an error value should unwrap to it: %v", ev.Err)
		}
		time.Sleep(time.Second)
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
