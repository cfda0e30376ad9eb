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
)

// TestLossWarnsOncePerChange: the lock nodes lose their data while a run
// holds its running lock, twice in a row: the loss is reported each time
// (OutcomeLost, Unlock's error matches redlock.ErrLockLost) but logged at
// Warn once; the next healthy run logs once at Info that the job is back.
func TestLossWarnsOncePerChange(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	var logs workertest.Buffer
	lost := make(chan Event, 4)
	l, err := New(newLocks(t, c), WithInterval("job", 100*time.Millisecond), WithTTL(time.Second),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		WithObserver(func(ev Event) {
			if ev.Outcome == OutcomeLost {
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
	if err := run(false); err != nil {
		t.Errorf("healthy run: Unlock = %v", err)
	}
	out := logs.String()
	warns, backs := strings.Count(out, "level=WARN"), strings.Count(out, "gocron job back to normal")
	if warns != 1 || backs != 1 {
		t.Errorf("%d Warn lines and %d back-to-normal lines, want 1 and 1:\n%s", warns, backs, out)
	}
}
