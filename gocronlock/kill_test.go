package gocronlock

import (
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// TestKilledReplicaTickRunsElsewhere: the replica running a job every second
// hangs in it and loses its lock client (it is cut off or dead: no
// keep-alive, no release). Its running lock expires within the TTL and
// another replica runs the next tick; no tick runs twice.
func TestKilledReplicaTickRunsElsewhere(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	const ttl = time.Second
	rec := &recorder{}
	hang, hung := make(chan struct{}), make(chan int, 1)
	var first sync.Once
	locks := make([]*redlock.Client, 3)
	scheds := make([]gocron.Scheduler, 3)
	for i := range scheds {
		locks[i] = newLocks(t, c)
		l, err := New(locks[i], map[string]string{"job": "@every 1s"}, scheduler.WithTTL(ttl), scheduler.WithObserver(rec.observe), scheduler.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		scheds[i] = newScheduler(t, gocron.WithDistributedLocker(l))
		task := func() {
			rec.task(i, 0)()
			first.Do(func() { hung <- i; <-hang })
		}
		if _, err := scheds[i].NewJob(gocron.DurationJob(time.Second), gocron.NewTask(task), gocron.WithName("job")); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { close(hang) }) // before the schedulers' shutdown
	for i, s := range scheds {
		sleepUntilPhase(offsets(3)(i))
		s.Start()
	}

	var victim int
	select {
	case victim = <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("no run within 10s")
	}
	killed := time.Now()
	_ = locks[victim].Close() // locks still held expire at their TTL

	took := rec.firstRunAfter(killed, victim, 10*time.Second)
	if took.IsZero() {
		t.Fatalf("no other replica ran the job within 10s of replica %d's death", victim)
	}
	ticks, counts, _ := rec.ticks()
	t.Logf("replica %d killed; another ran the job %v later (running lock TTL %v); outcomes %v",
		victim, took.Sub(killed).Round(time.Millisecond), ttl, counts)
	for i := 1; i < len(ticks); i++ {
		if ticks[i].Equal(ticks[i-1]) {
			t.Errorf("tick %s ran twice", ticks[i])
		}
	}
}

// firstRunAfter waits up to wait for a run after since by a replica other
// than but, and returns its start (zero if none).
func (r *recorder) firstRunAfter(since time.Time, but int, wait time.Duration) time.Time {
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r.mu.Lock()
		for _, x := range r.runs {
			if x.replica != but && x.start.After(since) {
				r.mu.Unlock()
				return x.start
			}
		}
		r.mu.Unlock()
	}
	return time.Time{}
}
