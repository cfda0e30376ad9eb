package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestCompletionRecordRidesTheRelease: a recorded lock's release writes the
// record on every node, in the release's own pipeline (no extra batch), and
// the next acquisition of the same id finds it in its own round; another id,
// a failed run and a lost lock leave none.
func TestCompletionRecordRidesTheRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, mems := memClient(t, 3)
		once := WithCompletion("task-1", time.Hour)
		l, err := c.TryAcquire(ctx, "sku", time.Minute, once)
		if err != nil || l.FoundCompletion() {
			t.Fatalf("first acquisition: %v, found %v", err, l.FoundCompletion())
		}
		if err := l.RecordCompletion(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := mems[0].batches
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := mems[0].batches - before; got != 1 {
			t.Errorf("release with its record took %d batches on a node, want 1", got)
		}
		rec := keyOf(c.cfg.prefix, "sku") + recordSuffix
		for i, m := range mems {
			m.mu.Lock()
			z := m.zset(rec, false)
			m.mu.Unlock()
			if z == nil || len(z.m) != 1 {
				t.Errorf("node %d has no record", i)
			}
		}
		again, err := c.TryAcquire(ctx, "sku", time.Minute, once)
		if err != nil || !again.FoundCompletion() {
			t.Fatalf("re-delivery: %v, found %v; want the record found", err, again.FoundCompletion())
		}
		_ = again.Release(ctx)
		other, err := c.TryAcquire(ctx, "sku", time.Minute, WithCompletion("task-2", time.Hour))
		if err != nil || other.FoundCompletion() {
			t.Fatalf("another id: %v, found %v", err, other.FoundCompletion())
		}
		_ = other.Release(ctx) // not recorded: the work failed
		retry, err := c.TryAcquire(ctx, "sku", time.Minute, WithCompletion("task-2", time.Hour))
		if err != nil || retry.FoundCompletion() {
			t.Fatalf("a failed run's retry: %v, found %v; want no record", err, retry.FoundCompletion())
		}
		_ = retry.Release(ctx)
	})
}

// TestCompletionRecordSurvivesAMinorityLoss: the record on one answering node
// is enough, so a node that lost its data does not hide it.
func TestCompletionRecordSurvivesAMinorityLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, mems := memClient(t, 3)
		once := WithCompletion("t", time.Hour)
		l, err := c.TryAcquire(ctx, "r", time.Minute, once)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.RecordCompletion()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mems[0].set(func(m *memNode) { clear(m.data); clear(m.zsets) }) // restarted empty
		mems[1].set(func(m *memNode) { m.delay = 5 * time.Millisecond })
		again, err := c.TryAcquire(ctx, "r", time.Minute, once)
		if err != nil || !again.FoundCompletion() {
			t.Fatalf("after one node lost its data: %v, found %v", err, again.FoundCompletion())
		}
		_ = again.Release(ctx)
	})
}

// TestCompletionRecordExpiresAfterItsWindow: the record is kept for the
// window, then gone.
func TestCompletionRecordExpiresAfterItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := memClient(t, 3)
		once := WithCompletion("t", time.Minute)
		l, _ := c.TryAcquire(ctx, "r", time.Second, once)
		_ = l.RecordCompletion()
		_ = l.Release(ctx)
		time.Sleep(59 * time.Second)
		l, _ = c.TryAcquire(ctx, "r", time.Second, once)
		if !l.FoundCompletion() {
			t.Fatal("record gone within its window")
		}
		_ = l.Release(ctx)
		time.Sleep(2 * time.Second)
		l, _ = c.TryAcquire(ctx, "r", time.Second, once)
		if l.FoundCompletion() {
			t.Fatal("record still there after its window")
		}
		_ = l.Release(ctx)
	})
}

// TestHandOverCarriesTheRecord: a local waiter of the same id, handed the
// lock by the recorded holder's release, learns of the record in that very
// round (the write goes ahead of its look-up), before it starts.
func TestHandOverCarriesTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := memClient(t, 3)
		once := WithCompletion("t", time.Hour)
		l, err := c.Acquire(ctx, "r", time.Minute, once)
		if err != nil {
			t.Fatal(err)
		}
		ch := waitFor(ctx, c, "r", time.Minute, once)
		synctest.Wait()
		_ = l.RecordCompletion()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-ch
		if got.err != nil || !got.l.FoundCompletion() {
			t.Fatalf("waiter: %v, found %v; want the record found", got.err, got.l.FoundCompletion())
		}
		if got.l.via != handoverLocal {
			t.Errorf("waiter acquired via %q, want a local hand-over", got.l.via)
		}
		_ = got.l.Release(ctx)
	})
}

// TestLostLockWritesNoRecord: a lock lost before its release leaves no
// record, even when its holder asked for one.
func TestLostLockWritesNoRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := memClient(t, 3)
		once := WithCompletion("t", time.Hour)
		l, _ := c.TryAcquire(ctx, "r", time.Second, once)
		_ = l.RecordCompletion()
		time.Sleep(2 * time.Second) // validity over: lost
		if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release: %v, want ErrLockLost", err)
		}
		if err := l.RecordCompletion(); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("RecordCompletion after release: %v, want ErrNotHeld", err)
		}
		again, _ := c.TryAcquire(ctx, "r", time.Second, once)
		if again.FoundCompletion() {
			t.Fatal("a lost lock left a record")
		}
		_ = again.Release(ctx)
	})
}

// TestRunWithCompletion: Run records fn's success and skips fn for the same
// id after that, returning ErrCompleted; a failed fn is run again.
func TestRunWithCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, _ := memClient(t, 3)
		runs := 0
		fn := func(context.Context) error { runs++; return nil }
		once := WithCompletion("job-1", time.Hour)
		if err := c.Run(ctx, "r", time.Second, fn, once); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx, "r", time.Second, fn, once); !errors.Is(err, ErrCompleted) || runs != 1 {
			t.Fatalf("second Run: %v after %d runs, want ErrCompleted after 1", err, runs)
		}
		fail := errors.New("boom")
		failing := WithCompletion("job-2", time.Hour)
		_ = c.Run(ctx, "r", time.Second, func(context.Context) error { return fail }, failing)
		if err := c.Run(ctx, "r", time.Second, fn, failing); err != nil || runs != 2 {
			t.Fatalf("retry after a failure: %v, runs %d; want it run", err, runs)
		}
	})
}

// TestWithCompletionRefusesBadInput: an empty id, a window that is not
// positive or too long are refused where they are given.
func TestWithCompletionRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3)
		for _, o := range []LockOption{WithCompletion("", time.Hour), WithCompletion("x", 0), WithCompletion("x", MaxCompletionWindow+1)} {
			if _, err := c.TryAcquire(context.Background(), "r", time.Second, o); !errors.Is(err, ErrInvalid) {
				t.Errorf("TryAcquire: %v, want ErrInvalid", err)
			}
		}
		l, _ := c.TryAcquire(context.Background(), "r", time.Second)
		if err := l.RecordCompletion(); !errors.Is(err, ErrInvalid) {
			t.Errorf("RecordCompletion without WithCompletion: %v, want ErrInvalid", err)
		}
		_ = l.Release(context.Background())
	})
}

// TestEarlyHandOverKeepsRecordsCheap: a waiter with a record looks it up
// while it waits, so that a hand-over need not wait for its round: it
// starts at once (the nodes answer 10ms late here), and it knows whether
// its record was there.
func TestEarlyHandOverKeepsRecordsCheap(t *testing.T) {
	for _, doneBefore := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c, mems := memClient(t, 3)
			if doneBefore { // task B completed earlier: its record is there
				b, _ := c.Acquire(ctx, "r", time.Minute, WithCompletion("B", time.Hour))
				_ = b.RecordCompletion()
				_ = b.Release(ctx)
			}
			l, err := c.Acquire(ctx, "r", time.Minute, WithCompletion("A", time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // the look-up goes out after the holder's round was decided
			ch := waitFor(ctx, c, "r", time.Minute, WithCompletion("B", time.Hour))
			synctest.Wait() // queued, its look-up answered
			for _, m := range mems {
				m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
			}
			_ = l.RecordCompletion()
			released := time.Now()
			go func() { _ = l.Release(ctx) }()
			got := <-ch
			if got.err != nil {
				t.Fatal(got.err)
			}
			if d := got.at.Sub(released); d != 0 {
				t.Errorf("doneBefore %v: the waiter started %v after the release, want at once (an early hand-over)", doneBefore, d)
			}
			if got.l.FoundCompletion() != doneBefore {
				t.Errorf("found %v, want %v", got.l.FoundCompletion(), doneBefore)
			}
			_ = got.l.Release(ctx)
		})
	}
}

// TestRecordAfterScriptFlushIsReportedThenWritten: a node that lost its
// script cache refuses a record's write; the release says so (the record is
// on fewer than a majority), and the next one, with the scripts loaded
// again, writes its record.
func TestRecordAfterScriptFlushIsReportedThenWritten(t *testing.T) {
	ctx := context.Background()
	c, raw := embeddedClient(t)
	write := func(id string) error {
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithCompletion(id, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		_ = l.RecordCompletion()
		return l.Release(ctx)
	}
	if err := write("a"); !errors.Is(err, ErrQuorum) {
		t.Fatalf("release whose record met NOSCRIPT: %v, want ErrQuorum (record not stored)", err)
	}
	l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithCompletion("b", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.RecordCompletion()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the scripts were loaded again: %v", err)
	}
	if again, _ := c.TryAcquire(ctx, "r", 5*time.Second, WithCompletion("b", time.Hour)); !again.FoundCompletion() {
		t.Fatal("record b not found")
	} else {
		_ = again.Release(ctx)
	}
}
