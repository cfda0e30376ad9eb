package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// With a real redlock client shared by two jobs' runs in one process, a
// tick that finds the running lock held by this same process is reported
// as an overlap (skipped, or delayed and then run), not as a lock error:
// redlock queues a process's own Acquire callers locally, and a wait that
// ends in that queue carries only the context's error.
func TestSameProcessOverlapWithRedlock(t *testing.T) {
	node := redistest.StartServer(t)
	locks, err := redlock.NewFromURLs([]string{node.URL()}, redlock.WithNodeTimeout(time.Second)) // a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	rec := &recorder{}                      // events of both jobs
	skip, delay := &recorder{}, &recorder{} // runs of each job
	s, err := New(locks, quiet, WithSkew(300*time.Millisecond), WithObserver(rec.observe))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register("skip", "* * * * * *", skip.job(0, 1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := s.Register("delay", "* * * * * *", delay.job(0, 1500*time.Millisecond), WithDelayIfRunning(0)); err != nil {
		t.Fatal(err)
	}
	// A second replica of "skip" on the same client, under Singleton.
	other := startReplica(t, redlockLocker{locks}, "skip", Every(time.Second), skip.job(1, 1500*time.Millisecond), 0,
		WithSkew(300*time.Millisecond), WithObserver(rec.observe))
	s.Start()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(3*time.Second + 100*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopCrons(other)

	// A lock error is a failure here unless a loaded machine made a call
	// slow (a tick won past the margin).
	for _, e := range rec.eventsOf(OutcomeLockError) {
		if !strings.Contains(e.Err.Error(), "past the") {
			t.Fatalf("lock error: %+v", e)
		}
		t.Logf("slow lock call: %v", e.Err)
	}
	count := func(o Outcome, job string) (n int) {
		for _, e := range rec.eventsOf(o) {
			if e.Job == job {
				n++
			}
		}
		return n
	}
	if count(OutcomeSkippedOverlap, "skip") == 0 || count(OutcomeLate, "delay") == 0 {
		t.Fatalf("want skipped overlaps for 'skip' and delays for 'delay', got events %+v", rec.events)
	}
	if count(OutcomeSkippedOtherReplica, "skip") == 0 {
		t.Fatalf("the two replicas sharing the client should each lose ticks to the other, got %+v", rec.events)
	}
	if n := skip.overlaps.Load() + delay.overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping runs", n)
	}
	time.Sleep(time.Second) // let the tick locks go before the node closes
}
