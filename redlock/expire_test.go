package redlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lossWatch counts what an operator sees of lock losses: "lock lost" log
// lines and EventLost events.
type lossWatch struct {
	mu     sync.Mutex
	logs   bytes.Buffer
	events int
}

func (w *lossWatch) options() []Option {
	h := slog.NewTextHandler(lockedWriter{w}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return []Option{WithLogger(slog.New(h)), WithObserver(func(e Event) {
		if e.Kind == EventLost {
			w.mu.Lock()
			w.events++
			w.mu.Unlock()
		}
	})}
}

// seen returns the number of "lock lost" lines and of EventLost events.
func (w *lossWatch) seen() (lines, events int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.logs.String(), `msg="redlock lock lost"`), w.events
}

type lockedWriter struct{ w *lossWatch }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.logs.Write(p)
}

// TestLeaveToExpireIsNotALoss: a lock left to expire keeps its keys until
// their TTL and then ends silently: no "lock lost" line, no EventLost, Lost()
// stays open. The control, the same lock not left, is reported lost once:
// without LeaveToExpire the test would fail.
func TestLeaveToExpireIsNotALoss(t *testing.T) {
	for _, leave := range []bool{true, false} {
		name := map[bool]string{true: "left", false: "control"}[leave]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := &lossWatch{}
				c, mems := memClient(t, 3, w.options()...)
				const ttl = time.Second
				l, err := c.TryAcquire(context.Background(), "tick", ttl)
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the nodes beyond the quorum answer in the background
				if leave {
					if err := (*mechanics)(l).LeaveToExpire(); err != nil {
						t.Fatal(err)
					}
					if n := holders(c, mems, "tick", l.Token()); n != 3 {
						t.Fatalf("left lock held on %d of 3 nodes, want its keys kept until the TTL", n)
					}
				}
				time.Sleep(2 * ttl)
				synctest.Wait()
				if n := holders(c, mems, "tick", l.Token()); n != 0 {
					t.Fatalf("keys still on %d nodes after the TTL", n)
				}
				lines, events := w.seen()
				lost := isClosed(l.Lost())
				if leave && (lines != 0 || events != 0 || lost) {
					t.Fatalf("left lock reported lost: %d log lines, %d events, Lost() closed %v\n%s", lines, events, lost, w.logs.String())
				}
				if !leave && (lines != 1 || events != 1 || !lost) {
					t.Fatalf("control: want one loss line and event and Lost() closed, got %d, %d, %v", lines, events, lost)
				}
			})
		})
	}
}

// TestLeaveToExpireEndsTheLocalLock: after LeaveToExpire the lock is no
// longer this process's: keep-alives end without the loss cause, Release
// and Extend say ErrNotHeld, a second LeaveToExpire too; an already lost
// lock answers ErrLockLost.
func TestLeaveToExpireEndsTheLocalLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3, WithLogger(slog.New(slog.DiscardHandler)))
		ctx := context.Background()
		l, err := c.TryAcquire(ctx, "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		if err := (*mechanics)(l).LeaveToExpire(); err != nil {
			t.Fatal(err)
		}
		<-kctx.Done()
		if cause := context.Cause(kctx); errors.Is(cause, ErrLockLost) {
			t.Fatalf("keep-alive ended with %v", cause)
		}
		for what, err := range map[string]error{
			"Release": l.Release(ctx), "Extend": l.Extend(ctx, time.Second), "LeaveToExpire": (*mechanics)(l).LeaveToExpire(),
		} {
			if !errors.Is(err, ErrNotHeld) {
				t.Errorf("%s after LeaveToExpire: %v, want ErrNotHeld", what, err)
			}
		}

		gone, err := c.TryAcquire(ctx, "b", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := (*mechanics)(gone).LeaveToExpire(); !errors.Is(err, ErrLockLost) {
			t.Fatalf("LeaveToExpire of a lost lock: %v, want ErrLockLost", err)
		}
	})
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
