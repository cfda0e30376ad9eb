package gocronlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
)

// TestLossWarnsOncePerChange: the lock nodes lose their data while a run
// holds its running lock, twice in a row: the loss is reported each time,
// when it happens (OutcomeFailed with redlock.ErrLockLost; Unlock's error
// matches it too) but logged at Error once; the next healthy run, the
// settle time after the last loss, logs once at Info that the job is back.
func TestLossWarnsOncePerChange(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	var logs workertest.Buffer
	lost := make(chan scheduler.Event, 4)
	l, err := New(newLocks(t, c), map[string]string{"job": "@every 100ms"}, scheduler.WithTTL(time.Second),
		scheduler.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		scheduler.WithObserver(func(ev scheduler.Event) {
			if ev.Outcome == scheduler.OutcomeFailed {
				lost <- ev
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	run := func(flush bool) error {
		time.Sleep(100 * time.Millisecond) // the next interval
		lk, err := l.Lock(context.Background(), "job")
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if flush {
			for _, cl := range c.Clients(t) {
				if err := cl.FlushAll(context.Background()).Err(); err != nil {
					t.Fatalf("FLUSHALL: %v", err)
				}
			}
			select {
			case ev := <-lost:
				if !errors.Is(ev.Err, redlock.ErrLockLost) {
					t.Errorf("lost event error %v, want redlock.ErrLockLost", ev.Err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no loss reported within 10s of the nodes' flush")
			}
		}
		return lk.Unlock(context.Background())
	}
	for i := range 2 {
		if err := run(true); !errors.Is(err, redlock.ErrLockLost) {
			t.Errorf("run %d: Unlock = %v, want redlock.ErrLockLost", i, err)
		}
	}
	time.Sleep(5 * time.Second) // the settle time (statelog) since the last loss
	if err := run(false); err != nil {
		t.Errorf("healthy run: Unlock = %v", err)
	}
	out := logs.String()
	errs, backs := strings.Count(out, "level=ERROR"), strings.Count(out, "cron job back to normal")
	if errs != 1 || backs != 1 {
		t.Errorf("%d Error lines and %d back-to-normal lines, want 1 and 1:\n%s", errs, backs, out)
	}
}
