package gocronlock

import (
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// TestLongJobKeptAlive: a 4.5s job every second on three replicas, with a
// running lock of 3s TTL (room for a keep-alive round on a loaded machine): the lock is kept alive, so the job never runs
// on two replicas at once and the ticks it overruns are skipped everywhere,
// none run twice. The control's lock (by name, 3s, no keep-alive)
// expires under the job and lets another replica start it.
func TestLongJobKeptAlive(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	const ttl = 3 * time.Second
	sc := scenario{
		replicas: 3, phase: offsets(3), name: "long",
		def: func() gocron.JobDefinition { return gocron.DurationJob(time.Second) }, work: 4500 * time.Millisecond, run: 10 * time.Second,
	}

	t.Run("kept alive", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(int) gocron.Locker {
			l, err := New(newLocks(t, c), map[string]string{"long": "@every 1s"}, scheduler.WithTTL(ttl), scheduler.WithObserver(rec.observe), scheduler.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		sc.play(t, rec)
		ticks, counts, errs := rec.ticks()
		t.Logf("ticks won %d, runs %d, outcomes %v, errors %v, most runs at once %d", len(ticks), rec.runCount(), counts, errs, rec.maxActive)
		for i := 1; i < len(ticks); i++ {
			if ticks[i].Equal(ticks[i-1]) {
				t.Errorf("tick %s ran twice", ticks[i])
			}
		}
		if rec.maxActive != 1 {
			t.Errorf("the job ran %d times at once; its running lock should keep other replicas out", rec.maxActive)
		}
		if counts[scheduler.OutcomeFailed] != 0 || counts[scheduler.OutcomeSkippedOverlap] == 0 || len(ticks) < 2 || rec.runCount() != len(ticks) {
			t.Errorf("want no loss, skipped overlaps, at least 2 runs, one per tick won: outcomes %v, runs %d", counts, rec.runCount())
		}
	})

	t.Run("control: no keep-alive", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		sc := sc
		sc.locker = func(int) gocron.Locker {
			return naiveLocker{locks: newLocks(t, c), key: func(name string) string { return "naive:" + name }, ttl: ttl}
		}
		sc.play(t, rec)
		t.Logf("control: runs %d, most at once %d", rec.runCount(), rec.maxActive)
		if rec.maxActive < 2 {
			t.Errorf("control: the job never ran twice at once; a lock that expires under it should let it")
		}
	})
}
