package gocronlock

import (
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// TestIntervalRunsOncePerWindow is gocron issue #841: a DurationJob(1s) on
// three schedulers started 0, 333 and 666ms apart runs once per second
// across them with this locker; locked by the job's name alone (the
// control), it runs once per second on each.
func TestIntervalRunsOncePerWindow(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	sc := scenario{
		replicas: 3, phase: offsets(3), name: "sync",
		def: func() gocron.JobDefinition { return gocron.DurationJob(time.Second) }, work: time.Millisecond, run: 6 * time.Second,
	}

	t.Run("tick keyed", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(int) gocron.Locker {
			l, err := New(newLocks(t, c), map[string]string{"sync": "@every 1s"}, scheduler.WithObserver(rec.observe), scheduler.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		sc.play(t, rec)
		checkOncePerTick(t, rec, time.Second, 5)
		windows, runs := runsPerWindow(rec, time.Second)
		t.Logf("%d runs over %d one-second windows", runs, windows)
	})

	t.Run("control: name keyed", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(int) gocron.Locker {
			return naiveLocker{locks: newLocks(t, c), key: func(name string) string { return "naive:" + name }, ttl: 5 * time.Second}
		}
		sc.play(t, rec)
		windows, runs := runsPerWindow(rec, time.Second)
		t.Logf("control: %d runs over %d one-second windows", runs, windows)
		if runs < 2*windows {
			t.Errorf("control: %d runs over %d windows; a name-keyed lock should let each replica run every interval", runs, windows)
		}
	})
}
