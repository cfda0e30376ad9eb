package gocronlock

import (
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
)

// scenario runs one job on several gocron schedulers, each with a locker of
// its own, started at given offsets within a second.
type scenario struct {
	replicas int
	phase    func(i int) time.Duration // when replica i starts, past a whole second
	locker   func(i int) gocron.Locker
	clock    func(i int) gocron.SchedulerOption // nil: the real clock
	def      func() gocron.JobDefinition        // one per scheduler: gocron's CronJob keeps its parsed schedule in it
	name     string
	work     time.Duration // how long each run lasts
	run      time.Duration // how long the job is scheduled after the last start
}

// play starts the schedulers at their offsets, lets the job run, and shuts
// them down (waiting for runs under way).
func (sc scenario) play(t *testing.T, rec *recorder) {
	t.Helper()
	scheds := make([]gocron.Scheduler, sc.replicas)
	for i := range scheds {
		opts := []gocron.SchedulerOption{gocron.WithDistributedLocker(sc.locker(i))}
		if sc.clock != nil {
			opts = append(opts, sc.clock(i))
		}
		scheds[i] = newScheduler(t, opts...)
		if _, err := scheds[i].NewJob(sc.def(), gocron.NewTask(rec.task(i, sc.work)), gocron.WithName(sc.name)); err != nil {
			t.Fatalf("replica %d: NewJob: %v", i, err)
		}
	}
	for i, s := range scheds {
		sleepUntilPhase(sc.phase(i))
		s.Start()
	}
	time.Sleep(sc.run)
	var wg sync.WaitGroup
	for _, s := range scheds {
		wg.Go(func() { _ = s.Shutdown() })
	}
	wg.Wait()
}

// offsets spreads n replicas over a second, starting 150ms past it: 150,
// 483, 816ms for 3, away from the second's edges.
func offsets(n int) func(i int) time.Duration {
	return func(i int) time.Duration { return 150*time.Millisecond + time.Duration(i)*time.Second/time.Duration(n) }
}
