package gocronlock_test

import (
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/gocronlock"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
	"github.com/go-co-op/gocron/v2"
)

// readmeScheduler is a gocron scheduler as the README's gocron section
// describes it.
func readmeScheduler(locks *redlock.Client, syncPrices, buildReport func()) gocron.Scheduler {
	locker, _ := gocronlock.New(locks, map[string]string{ // each job under its gocron name, with its schedule
		"sync-prices":    "@every 30s", // gocron.DurationJob(30*time.Second)
		"nightly-report": "0 2 * * *",
	})
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	s.NewJob(gocron.DurationJob(30*time.Second), gocron.NewTask(syncPrices), gocron.WithName("sync-prices"))
	s.NewJob(gocron.CronJob("0 2 * * *", false), gocron.NewTask(buildReport), gocron.WithName("nightly-report"))
	s.Start()
	return s
}

// TestReadmeGocron runs the README's snippet: both jobs are scheduled under
// the locker, and the scheduler shuts down cleanly.
func TestReadmeGocron(t *testing.T) {
	locks := redlocktest.NewClient(t)
	s := readmeScheduler(locks, func() {}, func() {})
	if n := len(s.Jobs()); n != 2 {
		t.Errorf("%d jobs scheduled, want 2", n)
	}
	if err := s.Shutdown(); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
