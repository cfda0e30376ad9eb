package gocronlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
)

// TestLostTickStopsAtOnce: a replica that finds its tick's record carried
// by a quorum of the nodes for another replica stops after one attempt, so
// that it leaves gocron's singleton or limit slot at once. The control is
// a split vote (the record held on two of the three nodes by two other
// holders, a quorum for none): the same refusal is retried.
func TestLostTickStopsAtOnce(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	jobs := map[string]string{"won": "@every 1s", "split": "@every 1s"}
	opts := []scheduler.Option{cronsim.WithClock[scheduler.Option](func() time.Time { return now }), scheduler.WithLogger(quiet)}
	record := func(job string) string { return "gocron:" + job + ":" + strconv.FormatInt(now.UnixMilli(), 10) }

	winner, err := New(newLocks(t, c), jobs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := winner.Lock(context.Background(), "won")
	if err != nil {
		t.Fatalf("winner's Lock: %v", err)
	}
	_ = lk.Unlock(context.Background()) // the record stays
	for i, url := range c.URLs()[:2] {  // a split: one holder per node
		one, err := redlock.NewFromURLs([]string{url}, redlock.WithNodeTimeout(nodeTimeout), redlock.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = one.Close() })
		if _, err := one.TryAcquire(context.Background(), record("split"), time.Minute); err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
	}

	var mu sync.Mutex
	attempts := map[string]int{}
	observed, err := redlock.NewFromURLs(c.URLs(), redlock.WithNodeTimeout(nodeTimeout), redlock.WithLogger(quiet),
		redlock.WithObserver(func(ev redlock.Event) {
			if ev.Kind == redlock.EventAcquire {
				mu.Lock()
				attempts[ev.Resource]++
				mu.Unlock()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = observed.Close() })
	loser, err := New(observed, jobs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"won", "split"} {
		if _, err := loser.Lock(context.Background(), job); !errors.Is(err, redlock.ErrLocked) {
			t.Errorf("Lock(%s) = %v, want redlock.ErrLocked", job, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("acquisition attempts: %v", attempts)
	if n := attempts[record("won")]; n != 1 {
		t.Errorf("%d attempts on a record a quorum carries, want 1", n)
	}
	if n := attempts[record("split")]; n < 2 {
		t.Errorf("control: %d attempt on a split record, want retries", n)
	}
}
