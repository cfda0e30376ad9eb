package gocronlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// TestGocronModes runs the locker under gocron's own concurrency modes, on
// three schedulers started 150, 483 and 816ms into a second, each with
// three jobs every second under the mode: "short" (10ms) and "long" (1.5s,
// longer than its interval) with this locker as their job's locker
// (gocron.WithDistributedJobLocker), and "control" (10ms) with a lock on
// its name, held while it runs.
//
// In every mode: each tick of "short" runs once, none missing, where the
// control runs on two or three replicas per second (the modes are local
// to a scheduler and do not change #841); "long" never runs on two
// replicas at once, no tick twice, and each run (delayed ones included)
// counts for the interval it starts in; the scheduler's own locker, which
// refuses every lock, is never asked (a job's locker takes precedence).
func TestGocronModes(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	for _, m := range []mode{
		{name: "singleton reschedule", job: []gocron.JobOption{gocron.WithSingletonMode(gocron.LimitModeReschedule)}},
		{name: "singleton wait", job: []gocron.JobOption{gocron.WithSingletonMode(gocron.LimitModeWait)}},
		{name: "limit reschedule", sched: []gocron.SchedulerOption{gocron.WithLimitConcurrentJobs(3, gocron.LimitModeReschedule)}},
		{name: "limit wait", sched: []gocron.SchedulerOption{gocron.WithLimitConcurrentJobs(3, gocron.LimitModeWait)}},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			m.play(t, c)
		})
	}
}

// mode is one of gocron's concurrency settings: scheduler and job options.
type mode struct {
	name  string
	sched []gocron.SchedulerOption
	job   []gocron.JobOption
}

// modeRun is what one mode's scenario recorded, per job.
type modeRun struct {
	short, long, control recorder
	refusedLocker        refusingLocker
	lockErrs             atomic.Int64 // AfterLockError calls, every job
}

const (
	shortWork = 10 * time.Millisecond
	longWork  = 1500 * time.Millisecond
)

// play runs the scenario for 5s and checks it.
func (m mode) play(t *testing.T, c *redistest.Cluster) {
	r := &modeRun{}
	scheds := make([]gocron.Scheduler, 3)
	for i := range scheds {
		scheds[i] = m.replica(t, c, r, i)
	}
	for i, s := range scheds {
		sleepUntilPhase(offsets(3)(i))
		s.Start()
	}
	time.Sleep(5 * time.Second)
	var wg sync.WaitGroup
	stopping := time.Now()
	for _, s := range scheds {
		wg.Go(func() {
			if err := s.Shutdown(); err != nil {
				t.Logf("shutdown: %v after %v", err, time.Since(stopping))
			}
		})
	}
	wg.Wait()
	t.Logf("shutdown took %v", time.Since(stopping))

	checkOncePerTick(t, &r.short, time.Second, 3)
	checkRunsInTheirTicks(t, &r.short, time.Second)
	t.Logf("short: failed Locks took %v", r.short.refusalSpread())
	checkLong(t, &r.long)
	windows, runs := runsPerWindow(&r.control, time.Second)
	t.Logf("control: %d runs over %d one-second windows; AfterLockError %d times", runs, windows, r.lockErrs.Load())
	if runs < 2*windows {
		t.Errorf("control: %d runs over %d windows; a name-keyed lock should let replicas run each interval in turn", runs, windows)
	}
	if n := r.refusedLocker.calls.Load(); n != 0 {
		t.Errorf("the scheduler's locker was asked %d times; each job's own locker should take precedence", n)
	}
}

// replica returns replica i's scheduler with the mode's options and the
// three jobs.
func (m mode) replica(t *testing.T, c *redistest.Cluster, r *modeRun, i int) gocron.Scheduler {
	locks := newLocks(t, c)
	// Each mode's jobs have names of their own: the modes run at once on one cluster.
	short, long := m.jobName("short"), m.jobName("long")
	l, err := New(locks, map[string]string{short: "@every 1s", long: "@every 1s"}, scheduler.WithLogger(quiet),
		scheduler.WithObserver(func(ev scheduler.Event) {
			if ev.Job == short {
				r.short.observe(ev)
			} else {
				r.long.observe(ev)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, append([]gocron.SchedulerOption{gocron.WithDistributedLocker(&r.refusedLocker)}, m.sched...)...)
	control := naiveLocker{locks: locks, key: func(name string) string { return "naive:" + m.name + ":" + name }, ttl: 5 * time.Second}
	onLockError := gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, name string, err error) {
		r.lockErrs.Add(1)
		// Slow nodes (ErrQuorum) and shutdown (Canceled) are reported too.
		if name != "control" && !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) && !errors.Is(err, context.Canceled) {
			t.Errorf("AfterLockError for %s got %v, want an error matching redlock.ErrLocked", name, err)
		}
	}))
	for _, j := range []struct {
		name   string
		rec    *recorder
		work   time.Duration
		locker gocron.Locker
	}{
		{short, &r.short, shortWork, timedLocker{l, &r.short, i}},
		{long, &r.long, longWork, timedLocker{l, &r.long, i}},
		{"control", &r.control, shortWork, control},
	} {
		opts := append([]gocron.JobOption{gocron.WithName(j.name), gocron.WithDistributedJobLocker(j.locker), onLockError}, m.job...)
		if _, err := s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(j.rec.task(i, j.work)), opts...); err != nil {
			t.Fatalf("replica %d: NewJob %s: %v", i, j.name, err)
		}
	}
	return s
}

// jobName names a job of the mode: "singleton-wait-short".
func (m mode) jobName(name string) string { return strings.ReplaceAll(m.name, " ", "-") + "-" + name }

// checkLong checks the long job: never on two replicas at once, no tick
// won twice, one run per tick won, and every run in its tick's interval.
func checkLong(t *testing.T, r *recorder) {
	t.Helper()
	ticks, counts, errs := r.ticks()
	r.mu.Lock()
	most := r.maxActive
	r.mu.Unlock()
	t.Logf("long: ticks won %d, runs %d, most at once %d, outcomes %v, errors %v", len(ticks), r.runCount(), most, counts, errs)
	if most != 1 {
		t.Errorf("long: %d runs at once; its running lock should keep other replicas out", most)
	}
	for i := 1; i < len(ticks); i++ {
		if ticks[i].Equal(ticks[i-1]) {
			t.Errorf("long: tick %s won twice", ticks[i].Format(time.RFC3339Nano))
		}
	}
	if len(ticks)+counts[scheduler.OutcomeLockError] < 2 || r.runCount() != len(ticks) {
		t.Errorf("long: want at least 2 runs (or lock errors), one per tick won: %d runs, outcomes %v", r.runCount(), counts)
	}
	checkRunsInTheirTicks(t, r, time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	late := 0
	for _, x := range r.runs {
		if offPhase(x.replica, x.start) {
			late++
		}
	}
	t.Logf("long: %d runs started late (>200ms after the replica's timer); late Locks (queued by a Wait mode): %d won, %d refused",
		late, r.lateLocks[1], r.lateLocks[0])
}

// timedLocker measures how long the Locks that fail take: gocron calls
// Lock inside its singleton or limit slot.
type timedLocker struct {
	gocron.Locker
	rec     *recorder
	replica int
}

func (tl timedLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	start := time.Now()
	lk, err := tl.Locker.Lock(ctx, key)
	tl.rec.mu.Lock()
	defer tl.rec.mu.Unlock()
	if err != nil {
		tl.rec.refusals = append(tl.rec.refusals, time.Since(start))
	}
	if offPhase(tl.replica, start) {
		tl.rec.lateLocks[won(err)]++
	}
	return lk, err
}

// offPhase tells whether a Lock or run on replica i at t came more than
// 200ms after the replica's timer fired: queued by a Wait mode, or waiting
// within the lock budget for the previous run to release its lock.
func offPhase(i int, t time.Time) bool {
	d := t.Sub(t.Truncate(time.Second)) - offsets(3)(i)
	return d > 200*time.Millisecond || d < -800*time.Millisecond
}

// refusingLocker is a scheduler-wide locker that refuses every lock and
// counts how often it is asked.
type refusingLocker struct{ calls atomic.Int64 }

var errRefused = errors.New("scheduler-wide locker asked")

func (r *refusingLocker) Lock(context.Context, string) (gocron.Lock, error) {
	r.calls.Add(1)
	return nil, errRefused
}

// won indexes recorder.lateLocks: 1 for a won Lock, 0 for a refused one.
func won(err error) int {
	if err == nil {
		return 1
	}
	return 0
}
