package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// replica describes one replica's cron: its clock's offset from the lock
// service's (ahead if positive) and how late its cron delivers ticks.
type replica struct {
	offset, delay time.Duration
}

// clock is the replica's wall clock.
func (r replica) clock() func() time.Time {
	return func() time.Time { return time.Now().Add(r.offset) }
}

// start runs job on a cron that activates on the replica's whole seconds,
// wrapped by w as a robfig user writes it.
func (r replica) start(w cron.JobWrapper, job cron.Job) *cron.Cron {
	c := cron.New()
	c.Schedule(shifted{Every(time.Second), r.delay - r.offset}, cron.NewChain(w).Then(job))
	c.Start()
	return c
}

// naiveLock is the usual cron lock on a replica's clock: lock the tick,
// run, release at once.
func naiveLock(locks locker, now func() time.Time, ran func(tick time.Time)) cron.Job {
	return cron.FuncJob(func() {
		tick := secondTick(now())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		l, err := locks.TryAcquire(ctx, "naive:"+tick.String(), 5*time.Second)
		if err != nil {
			return
		}
		ran(tick)
		_ = l.Release(ctx)
	})
}

// The plain robfig idiom, no schedule given (and the same with
// WithSpec("* * * * * *")), default skew: four replicas, one on time, one
// 300ms late, one whose clock is 0.9·skew ahead and one 0.9·skew behind,
// run each per-second tick exactly once. The naive lock in the same
// setting runs ticks twice: the check can fail.
func TestRobfigIdiomEachTickOnce(t *testing.T) {
	for _, spec := range []string{"", "* * * * * *"} {
		t.Run("spec="+spec, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkIdiom(t, spec) })
		})
	}
}

func checkIdiom(t *testing.T, spec string) {
	t0 := time.Now()
	locks := newMemLocks()
	rec := &recorder{}
	var mu sync.Mutex
	naiveRuns := map[time.Time]int{}
	var crons []*cron.Cron
	skew := defaultSkew * 9 / 10
	for i, rp := range []replica{{0, 0}, {0, 300 * time.Millisecond}, {skew, 0}, {-skew, 0}} {
		opts := []Option{quiet, withClock(rp.clock()), WithObserver(rec.observe)}
		if spec != "" {
			opts = append(opts, WithSpec(spec))
		}
		w, err := newSingleton(locks.client(), "report", opts)
		if err != nil {
			t.Fatal(err)
		}
		crons = append(crons, rp.start(w, rec.job(i, 0)))
		crons = append(crons, rp.start(func(j cron.Job) cron.Job { return j }, naiveLock(locks.client(), rp.clock(), func(tick time.Time) {
			mu.Lock()
			naiveRuns[tick.UTC()]++
			mu.Unlock()
		})))
	}
	time.Sleep(10*time.Second + 500*time.Millisecond)
	stopCrons(crons...)

	got := rec.perTick()
	for tick, n := range got {
		if n != 1 {
			t.Errorf("tick %s ran %d times", tick.Format(time.TimeOnly), n)
		}
	}
	twice := 0
	for _, tick := range ticks(t0.Add(time.Second), 8) {
		if got[tick] != 1 {
			t.Errorf("tick %s ran %d times, want 1", tick.Format(time.TimeOnly), got[tick])
		}
		if naiveRuns[tick] > 1 {
			twice++
		}
	}
	if twice < 8 {
		t.Errorf("naive lock: %d of 8 ticks ran twice; the replica behind should rerun each", twice)
	}
	if n := rec.count(OutcomeSkippedOtherReplica); n < 3*8 {
		t.Errorf("%d skipped_other_replica events, want 3 per tick", n)
	}
	if n := rec.count(OutcomeSkippedBeyondSkew) + rec.count(OutcomeSkippedBeyondSkew) + rec.count(OutcomeLockError); n != 0 {
		t.Errorf("%d runs skipped or failed: %+v", n, rec.events)
	}
	time.Sleep(6 * time.Second) // let the tick records expire
}

// One Singleton given to cron.WithChain wraps two plain jobs and a Named
// one: each job runs each of its ticks once across two replicas, none is
// dropped. The control shares one name between two jobs, as a wrapper that
// does not keep them apart would: one of them loses every tick.
func TestOneWrapperSeveralJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		locks := newMemLocks()
		rec := &recorder{}
		var crons []*cron.Cron
		for i := range 2 {
			w, err := newSingleton(locks.client(), "svc", []Option{quiet, WithObserver(rec.observe)})
			if err != nil {
				t.Fatal(err)
			}
			c := cron.New(cron.WithSeconds(), cron.WithChain(w))
			for _, spec := range []string{"* * * * * *", "*/2 * * * * *"} {
				if _, err := c.AddJob(spec, rec.job(i, 0)); err != nil {
					t.Fatal(err)
				}
			}
			c.Start()
			crons = append(crons, c)
		}
		time.Sleep(4*time.Second + 100*time.Millisecond)
		stopCrons(crons...)
		byJob := map[string]int{}
		for _, e := range rec.eventsOf(OutcomeRan) {
			byJob[e.Job]++
		}
		if byJob["svc"] != 4 || byJob["svc#2"] != 2 {
			t.Fatalf("runs per job %v, want svc 4, svc#2 2", byJob)
		}

		// Control: two jobs under one name.
		shared := &recorder{}
		c := cron.New()
		for i := range 2 {
			cfg := withSkew(defaultSkew)
			cfg.logger = slog.New(slog.DiscardHandler)
			r, err := newRunner(locks.client(), "same", nil, shared.job(i, 0), cfg, background)
			if err != nil {
				t.Fatal(err)
			}
			c.Schedule(Every(time.Second), r)
		}
		c.Start()
		time.Sleep(3 * time.Second)
		stopCrons(c)
		if n := len(shared.runs()); n != 3 {
			t.Fatalf("control: %d runs of two jobs sharing a name over 3 ticks, want 3 (one job dropped each tick)", n)
		}
		time.Sleep(6 * time.Second)
	})
}

// A replica whose clock is 3s ahead with a 1s skew runs a 10s schedule's
// ticks 3s early; the record of each tick, kept for most of the interval,
// stops the on-time replica from running it again, and it says so at
// Warn. The control, 9.5s ahead, outlives the record (9s): ticks run
// twice, so the check can fail.
func TestRecordStopsAReplicaBeyondTheSkew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sched := Every(10 * time.Second)
		for _, tc := range []struct {
			name   string
			ahead  time.Duration
			twice  bool
			beyond int
		}{
			{"within the record", 3 * time.Second, false, 3},
			{"control: beyond the record", 9500 * time.Millisecond, true, 0},
		} {
			begin := time.Now()
			locks := newMemLocks()
			rec := &recorder{}
			var crons []*cron.Cron
			for i, off := range []time.Duration{tc.ahead, 0} {
				w, err := newSingleton(locks.client(), "j", []Option{quiet, withSchedule(sched), WithTTL(time.Second),
					withClock(replica{offset: off}.clock()), WithObserver(rec.observe)})
				if err != nil {
					t.Fatal(err)
				}
				c := cron.New()
				c.Schedule(shifted{sched, -off}, w(rec.job(i, 0)))
				c.Start()
				crons = append(crons, c)
			}
			time.Sleep(time.Until(begin.Add(34 * time.Second)))
			stopCrons(crons...)
			twice := 0
			for _, n := range rec.perTick() {
				if n > 1 {
					twice++
				}
			}
			if (twice > 0) != tc.twice {
				t.Errorf("%s: %d ticks ran twice (runs %v)", tc.name, twice, rec.perTick())
			}
			evs := rec.eventsOf(OutcomeSkippedBeyondSkew)
			if len(evs) != tc.beyond {
				t.Errorf("%s: %d skipped_beyond_skew events, want %d: %+v", tc.name, len(evs), tc.beyond, rec.events)
			}
			for _, e := range evs {
				if !errors.Is(e.Err, redlock.ErrLocked) || e.Replica == "" {
					t.Errorf("%s: event %+v", tc.name, e)
				}
			}
			time.Sleep(10 * time.Second)
		}
	})
}

// Without a schedule, a run delivered later than the skew after its whole
// second is skipped and reported, not run under a guessed tick.
func TestLateRunWithoutScheduleIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		w, err := newSingleton(newMemLocks().client(), "late", []Option{quiet, WithSkew(300 * time.Millisecond), WithObserver(rec.observe)})
		if err != nil {
			t.Fatal(err)
		}
		c := replica{delay: 400 * time.Millisecond}.start(w, rec.job(0, 0))
		time.Sleep(3 * time.Second)
		stopCrons(c)
		if len(rec.runs()) != 0 {
			t.Fatalf("a run 400ms late with a 300ms skew ran: %+v", rec.runs())
		}
		evs := rec.eventsOf(OutcomeSkippedBeyondSkew)
		if len(evs) < 2 || !errors.Is(evs[0].Err, errNoTick) || evs[0].level() != slog.LevelWarn {
			t.Fatalf("want skipped_beyond_skew events at Warn with errNoTick, got %+v", rec.events)
		}
	})
}
