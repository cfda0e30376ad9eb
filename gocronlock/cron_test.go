package gocronlock

import (
	"strconv"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// TestCronTickOnceWithClockOffsets: a CronJob every second on three
// schedulers whose clocks read 900ms behind, exact and 900ms ahead (within
// the default 1s skew), so that each fires a tick at its own moment, 1.8s
// apart at most: each tick runs once. The control keys its lock by the same tick
// but releases it when the 1ms job returns: each tick runs on every replica.
func TestCronTickOnceWithClockOffsets(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	clocks := []offsetClock{newOffsetClock(-900 * time.Millisecond), newOffsetClock(0), newOffsetClock(900 * time.Millisecond)}
	sc := scenario{
		replicas: 3, phase: func(int) time.Duration { return 500 * time.Millisecond }, name: "beat",
		clock: func(i int) gocron.SchedulerOption { return gocron.WithClock(clocks[i]) },
		def:   func() gocron.JobDefinition { return gocron.CronJob("* * * * * *", true) }, work: time.Millisecond, run: 5 * time.Second,
	}

	t.Run("tick keyed", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(i int) gocron.Locker {
			l, err := New(newLocks(t, c), map[string]string{"beat": "* * * * * *"}, cronsim.WithClock[scheduler.Option](clocks[i].Now),
				scheduler.WithObserver(rec.observe), scheduler.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		sc.play(t, rec)
		checkOncePerTick(t, rec, time.Second, 4)
	})

	t.Run("control: released at unlock", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(i int) gocron.Locker {
			key := func(name string) string {
				return "naive:" + name + ":" + strconv.FormatInt(clocks[i].Now().Truncate(time.Second).Unix(), 10)
			}
			return naiveLocker{locks: newLocks(t, c), key: key, ttl: 5 * time.Second}
		}
		sc.play(t, rec)
		windows, runs := runsPerWindow(rec, time.Second)
		t.Logf("control: %d runs over %d one-second windows", runs, windows)
		if runs < 2*windows {
			t.Errorf("control: %d runs over %d windows; a tick lock released at once should let replicas run each tick again", runs, windows)
		}
	})
}
