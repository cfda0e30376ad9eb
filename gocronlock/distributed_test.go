package gocronlock

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// distributedCase is one of gocron's distributed-locker scenarios.
type distributedCase struct {
	name       string
	sched, job bool // where the locker goes
	disabled   bool // WithDisabledDistributedJobLocker
	runs       int  // how many of the three schedulers run the job
}

// TestGocronDistributedScenarios replays gocron's own distributed-locker
// test (TestScheduler_WithDistributed) on real lock nodes: three schedulers
// start a job immediately, once; with the locker on the scheduler or on the
// job, one runs it and the other two get AfterLockError with an error that
// matches redlock.ErrLocked; with the job's locker disabled, all three run.
func TestGocronDistributedScenarios(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	for _, tc := range []distributedCase{
		{name: "scheduler locker", sched: true, runs: 1},
		{name: "job locker", job: true, runs: 1},
		{name: "job locker disabled", sched: true, disabled: true, runs: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.play(t, c)
		})
	}
}

// play runs the scenario and checks its runs and lock errors.
func (tc distributedCase) play(t *testing.T, c *redistest.Cluster) {
	var mu sync.Mutex
	var runs int
	var lockErrs []error
	onLockError := gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
		mu.Lock()
		lockErrs = append(lockErrs, err)
		mu.Unlock()
	})
	task := func() {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		runs++
		mu.Unlock()
	}
	scheds := make([]gocron.Scheduler, 3)
	for i := range scheds {
		sopts, jopts := tc.options(t, c)
		scheds[i] = newScheduler(t, sopts...)
		jopts = append(jopts, gocron.WithEventListeners(onLockError))
		if _, err := scheds[i].NewJob(gocron.DurationJob(time.Second), gocron.NewTask(task), jopts...); err != nil {
			t.Fatal(err)
		}
	}
	// The three immediate runs fall in one interval: started together,
	// well inside a second.
	sleepUntilPhase(200 * time.Millisecond)
	for _, s := range scheds {
		s.Start()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		done := runs+len(lockErrs) >= 3
		mu.Unlock()
		if done {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != tc.runs || len(lockErrs) != 3-tc.runs {
		t.Errorf("%d runs and %d lock errors (%v), want %d and %d", runs, len(lockErrs), lockErrs, tc.runs, 3-tc.runs)
	}
	for _, err := range lockErrs {
		if !errors.Is(err, redlock.ErrLocked) {
			t.Errorf("AfterLockError got %v, want an error matching redlock.ErrLocked", err)
		}
	}
}

// options returns one replica's scheduler and job options, with a locker
// of its own where the case puts one.
func (tc distributedCase) options(t *testing.T, c *redistest.Cluster) ([]gocron.SchedulerOption, []gocron.JobOption) {
	l, err := New(newLocks(t, c), map[string]string{tc.name: "@every 1s"}, scheduler.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	var sopts []gocron.SchedulerOption
	jopts := []gocron.JobOption{gocron.WithName(tc.name), gocron.WithStartAt(gocron.WithStartImmediately()), gocron.WithLimitedRuns(1)}
	if tc.sched {
		sopts = append(sopts, gocron.WithDistributedLocker(l))
	}
	if tc.job {
		jopts = append(jopts, gocron.WithDistributedJobLocker(l))
	}
	if tc.disabled {
		jopts = append(jopts, gocron.WithDisabledDistributedJobLocker(true))
	}
	return sopts, jopts
}
