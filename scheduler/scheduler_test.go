package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

func newTestScheduler(t *testing.T, locks locker, opts ...Option) *Scheduler {
	t.Helper()
	s, err := newScheduler(locks, append([]Option{quiet}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Three Scheduler replicas, 0ms job: each tick once; the job sees its tick.
func TestSchedulerReplicasRunEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		rec := &recorder{}
		var scheds []*Scheduler
		for i := range 3 {
			s := newTestScheduler(t, locks.client(), WithSkew(300*time.Millisecond), WithObserver(rec.observe))
			if err := s.Register("sync", "*/2 * * * * *", rec.job(i, 0)); err != nil {
				t.Fatal(err)
			}
			s.Start()
			s.Start() // no-op
			scheds = append(scheds, s)
		}
		time.Sleep(10*time.Second + 100*time.Millisecond)
		for _, s := range scheds {
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got := rec.perTick()
		for k := 1; k <= 5; k++ {
			tick := t0.Add(time.Duration(2*k) * time.Second).UTC()
			if got[tick] != 1 {
				t.Errorf("tick %s ran %d times", tick.Format(time.TimeOnly), got[tick])
			}
		}
		if len(got) != 5 {
			t.Errorf("ticks run: %v", got)
		}
		for _, e := range rec.eventsOf(OutcomeRan) {
			if e.Job != "sync" || e.Tick.IsZero() || e.Err != nil {
				t.Errorf("bad ran event %+v", e)
			}
		}
		time.Sleep(2 * time.Second)
	})
}

// Specs are interpreted in the Scheduler's location; a job may override it.
func TestSchedulerLocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble starts at 2000-01-01 00:00:00 UTC, 05:00 in UTC+5.
		plus5 := time.FixedZone("UTC+5", 5*3600)
		s := newTestScheduler(t, newMemLocks().client(), WithLocation(plus5))
		rec := &recorder{}
		if err := s.Register("at-five-oh-one", "0 1 5 * * *", rec.job(0, 0)); err != nil {
			t.Fatal(err)
		}
		if err := s.Register("utc", "0 1 0 * * *", rec.job(1, 0), WithLocation(time.UTC)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(time.Minute + time.Second)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		runs := rec.runs()
		if len(runs) != 2 {
			t.Fatalf("want both jobs to run at 00:01 UTC, got %+v", runs)
		}
		for _, r := range runs {
			if want := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC); !r.tick.Equal(want) {
				t.Errorf("replica %d tick %v, want %v", r.replica, r.tick, want)
			}
		}
		time.Sleep(3 * time.Second)
	})
}

// Stop waits for running jobs; runs waiting under WithDelayIfRunning give up.
func TestSchedulerStopWaitsForRunningJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		locks := newMemLocks()
		rec := &recorder{}
		s := newTestScheduler(t, locks.client(), WithSkew(300*time.Millisecond), WithDelayIfRunning(10*time.Second))
		if err := s.Register("slow", "* * * * * *", rec.job(0, 3*time.Second)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(2500 * time.Millisecond) // tick 1 runs until 4; tick 2 waits
		begin := time.Now()
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(begin); waited != 1500*time.Millisecond {
			t.Fatalf("Stop returned after %v, want 1.5s (the end of the running job)", waited)
		}
		runs := rec.runs()
		if len(runs) != 1 || runs[0].cause != nil {
			t.Fatalf("want only the running job, not cancelled, got %+v", runs)
		}
		if err := s.Stop(context.Background()); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		time.Sleep(3 * time.Second)
		if locks.held(runningResource("slow")) {
			t.Fatal("running lock still held")
		}
	})
}

// When Stop's context ends, the jobs' contexts are cancelled with cause
// errStopped and Stop returns the context's error.
func TestSchedulerStopDeadlineCancelsJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s := newTestScheduler(t, newMemLocks().client(), WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		if err := s.Register("endless", "* * * * * *", rec.job(0, time.Hour)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(1500 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded", err)
		}
		synctest.Wait()
		runs := rec.runs()
		if len(runs) != 1 || !errors.Is(runs[0].cause, errStopped) {
			t.Fatalf("want the job cancelled with errStopped, got %+v", runs)
		}
		if f := rec.eventsOf(OutcomeFailed); len(f) != 1 || !errors.Is(f[0].Err, errStopped) {
			t.Fatalf("want a failed event with errStopped, got %+v", rec.events)
		}
		time.Sleep(2 * time.Second)
	})
}

// Each outcome is logged with the job, tick and outcome.
func TestSchedulerLogsOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := capture{recs: make(chan slog.Record, 100)}
		s := newTestScheduler(t, newMemLocks().client(), WithSkew(300*time.Millisecond), WithLogger(slog.New(logs)))
		if err := s.Register("fails", "* * * * * *", func(ctx context.Context) error {
			info, ok := FromContext(ctx)
			if !ok || info.Job != "fails" || info.Tick.IsZero() {
				t.Errorf("FromContext %+v, %v", info, ok)
			}
			return errors.New("disk full")
		}); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(1100 * time.Millisecond)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := <-logs.recs
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if r.Level != slog.LevelError || r.Message != "cron job failed" || attrs["job"] != "fails" ||
			attrs["outcome"] != "failed" || attrs["err"] != "disk full" || attrs["tick"] == "" {
			t.Fatalf("log record %v %q %v", r.Level, r.Message, attrs)
		}
		time.Sleep(2 * time.Second)
	})
}

// Stop(nil) is refused with redlock.ErrInvalid, as every other call refuses a nil
// context, and leaves the Scheduler running: a later Stop still waits for
// the running job. Before, Stop(nil) panicked.
func TestSchedulerStopRefusesNilContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s := newTestScheduler(t, newMemLocks().client(), WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		if err := s.Register("job", "* * * * * *", rec.job(0, 200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		var nilCtx context.Context
		if err := s.Stop(nilCtx); !errors.Is(err, redlock.ErrInvalid) {
			t.Fatalf("Stop(nil) = %v, want redlock.ErrInvalid", err)
		}
		time.Sleep(2100 * time.Millisecond)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := rec.count(OutcomeRan); n != 2 {
			t.Fatalf("%d runs after Stop(nil), want the 2 ticks of the scheduler still running", n)
		}
		time.Sleep(3 * time.Second) // the tick records expire
	})
}
