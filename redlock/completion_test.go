package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCompletionRecordRidesTheRelease: a recorded lock's release writes the
// record on every node, in the release's own pipeline (no extra batch), and
// the next acquisition of the same id finds it in its own round; another id,
// a failed run and a lost lock leave none.
func TestCompletionRecordRidesTheRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, mems := memClient(t, 3)
		once := withCompletion("task-1", time.Hour)
		l, err := c.TryAcquire(ctx, "sku", time.Minute, once)
		if err != nil || (l.completedRun() >= 0) {
			t.Fatalf("first acquisition: %v, found %v", err, (l.completedRun() >= 0))
		}
		if err := l.recordCompletion(0); err != nil {
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
		if err != nil || again.completedRun() < 0 {
			t.Fatalf("re-delivery: %v, found %v; want the record found", err, (again.completedRun() >= 0))
		}
		_ = again.Release(ctx)
		other, err := c.TryAcquire(ctx, "sku", time.Minute, withCompletion("task-2", time.Hour))
		if err != nil || (other.completedRun() >= 0) {
			t.Fatalf("another id: %v, found %v", err, (other.completedRun() >= 0))
		}
		_ = other.Release(ctx) // not recorded: the work failed
		retry, err := c.TryAcquire(ctx, "sku", time.Minute, withCompletion("task-2", time.Hour))
		if err != nil || (retry.completedRun() >= 0) {
			t.Fatalf("a failed run's retry: %v, found %v; want no record", err, (retry.completedRun() >= 0))
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
		once := withCompletion("t", time.Hour)
		l, err := c.TryAcquire(ctx, "r", time.Minute, once)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.recordCompletion(0)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mems[0].set(func(m *memNode) { clear(m.data); clear(m.zsets) }) // restarted empty
		mems[1].set(func(m *memNode) { m.delay = 5 * time.Millisecond })
		again, err := c.TryAcquire(ctx, "r", time.Minute, once)
		if err != nil || again.completedRun() < 0 {
			t.Fatalf("after one node lost its data: %v, found %v", err, (again.completedRun() >= 0))
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
		once := withCompletion("t", time.Minute)
		l, _ := c.TryAcquire(ctx, "r", time.Second, once)
		_ = l.recordCompletion(0)
		_ = l.Release(ctx)
		time.Sleep(59 * time.Second)
		l, _ = c.TryAcquire(ctx, "r", time.Second, once)
		if l.completedRun() < 0 {
			t.Fatal("record gone within its window")
		}
		_ = l.Release(ctx)
		time.Sleep(2 * time.Second)
		l, _ = c.TryAcquire(ctx, "r", time.Second, once)
		if l.completedRun() >= 0 {
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
		once := withCompletion("t", time.Hour)
		l, err := c.Acquire(ctx, "r", time.Minute, once)
		if err != nil {
			t.Fatal(err)
		}
		ch := waitFor(ctx, c, "r", time.Minute, once)
		synctest.Wait()
		_ = l.recordCompletion(0)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-ch
		if got.err != nil || got.l.completedRun() < 0 {
			t.Fatalf("waiter: %v, found %v; want the record found", got.err, (got.l.completedRun() >= 0))
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
		once := withCompletion("t", time.Hour)
		l, _ := c.TryAcquire(ctx, "r", time.Second, once)
		_ = l.recordCompletion(0)
		time.Sleep(2 * time.Second) // validity over: lost
		if err := l.Release(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release: %v, want ErrLockLost", err)
		}
		if err := l.recordCompletion(0); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("RecordCompletion after release: %v, want ErrNotHeld", err)
		}
		again, _ := c.TryAcquire(ctx, "r", time.Second, once)
		if again.completedRun() >= 0 {
			t.Fatal("a lost lock left a record")
		}
		_ = again.Release(ctx)
	})
}

// TestWithCompletionRefusesBadInput: an empty id, a window that is not
// positive or too long are refused where they are given.
func TestWithCompletionRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := memClient(t, 3)
		bad := []LockOption{withCompletion("", time.Hour), withCompletion("", 0), withCompletion("x", 0),
			withCompletion("x", lockutil.MaxCompletionWindow+1)}
		for _, o := range bad {
			if _, err := c.TryAcquire(context.Background(), "r", time.Second, o); !errors.Is(err, ErrInvalid) {
				t.Errorf("TryAcquire: %v, want ErrInvalid", err)
			}
		}
		l, _ := c.TryAcquire(context.Background(), "r", time.Second)
		if err := l.recordCompletion(0); !errors.Is(err, ErrInvalid) {
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
				b, _ := c.Acquire(ctx, "r", time.Minute, withCompletion("B", time.Hour))
				_ = b.recordCompletion(0)
				_ = b.Release(ctx)
			}
			l, err := c.Acquire(ctx, "r", time.Minute, withCompletion("A", time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // the look-up goes out after the holder's round was decided
			ch := waitFor(ctx, c, "r", time.Minute, withCompletion("B", time.Hour))
			synctest.Wait() // queued, its look-up answered
			for _, m := range mems {
				m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
			}
			_ = l.recordCompletion(0)
			released := time.Now()
			go func() { _ = l.Release(ctx) }()
			got := <-ch
			if got.err != nil {
				t.Fatal(got.err)
			}
			if d := got.at.Sub(released); d != 0 {
				t.Errorf("doneBefore %v: the waiter started %v after the release, want at once (an early hand-over)", doneBefore, d)
			}
			if (got.l.completedRun() >= 0) != doneBefore {
				t.Errorf("found %v, want %v", (got.l.completedRun() >= 0), doneBefore)
			}
			_ = got.l.Release(ctx)
		})
	}
}

// TestRecordRidesTheReleaseScript: the record is written by the release's
// own script call. A node that lost its script cache gets the release, its
// record included, again as EVAL; a record the node cannot store (another
// type at its key) fails the release's call there, and the release reports
// ErrQuorum naming the record.
func TestRecordRidesTheReleaseScript(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	release := func(id string) error {
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, withCompletion(id, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.recordCompletion(0)
		return l.Release(ctx)
	}
	found := func(id string) bool {
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, withCompletion(id, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Release(ctx) }()
		return (l.completedRun() >= 0)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := release("a"); err != nil || !found("a") {
		t.Fatalf("release after SCRIPT FLUSH: %v, record found %v; want nil and found", err, found("a"))
	}
	if err := raw.Set(ctx, keyOf(c.cfg.prefix, "r")+recordSuffix, "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := release("b")
	if !errors.Is(err, ErrQuorum) || !strings.Contains(err.Error(), "completion record") {
		t.Fatalf("release whose record could not be stored: %v, want ErrQuorum naming the record", err)
	}
}

// TestLimitedLockWritesItsRecord: under WithLimit, a slot's release writes
// its holder's record, also while a waiter of another client is queued (the
// slot is reserved for it) and when a local waiter takes the slot over; the
// resource's mark still goes with its last slot (a record set beside the
// slot keys is not taken for a held slot).
func TestLimitedLockWritesItsRecord(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	var cs [2]*Client
	for i := range cs {
		// Without retries by the clock, a parked caller stays parked
		// until a hand-over or an announcement.
		c, err := NewFromURLs([]string{srv.URL()}, WithNodeTimeout(time.Second), WithRetryDelay(time.Hour, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	c, other := cs[0], cs[1]
	opts := func(id string) []LockOption { return []LockOption{WithLimit(2), withCompletion(id, time.Hour)} }
	done := func(l *Lock) {
		t.Helper()
		if err := l.recordCompletion(0); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a, err := c.TryAcquire(ctx, "r", 30*time.Second, opts("a")...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "r", 30*time.Second, opts("b")...)
	if err != nil {
		t.Fatal(err)
	}
	mark := keyOf(c.cfg.prefix, "r")
	remote := waitFor(ctx, other, "r", 30*time.Second, opts("remote")...)
	eventually(t, func() bool { return raw.ZCard(ctx, mark+":q").Val() > 0 })
	done(a) // reserved for the queued waiter (slot_release.lua)
	got := <-remote
	if got.err != nil {
		t.Fatal(got.err)
	}
	local := waitFor(ctx, c, "r", 30*time.Second, opts("local")...)
	parked(t, c, "r", 2, 0)
	done(b) // handed over (slot_turn.lua)
	next := <-local
	if next.err != nil || next.l.via != handoverLocal {
		t.Fatalf("local waiter: %v; want a local hand-over", next.err)
	}
	done(got.l) // no waiter: slot_release.lua's first branch
	done(next.l)
	for _, id := range []string{"a", "b", "remote", "local"} {
		if err := raw.ZScore(ctx, mark+recordSuffix, id).Err(); err != nil {
			t.Errorf("record %s: %v", id, err)
		}
	}
	if n := raw.Exists(ctx, mark).Val(); n != 0 {
		t.Errorf("the limit's mark outlived the last slot (%q)", raw.Get(ctx, mark).Val())
	}
}

// TestRecordKeepsItsRun: a record carries the run that wrote it to a later
// acquisition (the release script's score), a larger run overwrites it, and
// ForgetCompletion's release deletes it; without a record CompletedRun is
// -1. On a redis-server, through the release scripts themselves.
func TestRecordKeepsItsRun(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	once := withCompletion("t", time.Hour)
	// A record of the format before runs (its expiry in ms) is not read.
	old := float64(time.Now().Add(time.Hour).UnixMilli())
	if err := raw.ZAdd(ctx, keyOf(c.cfg.prefix, "r")+recordSuffix, redis.Z{Score: old, Member: "t"}).Err(); err != nil {
		t.Fatal(err)
	}
	step := func(mark func(*Lock) error) int {
		t.Helper()
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, once)
		if err != nil {
			t.Fatal(err)
		}
		run := l.completedRun()
		if mark != nil {
			if err := mark(l); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return run
	}
	record := func(n int) func(*Lock) error { return func(l *Lock) error { return l.recordCompletion(n) } }
	if got := step(record(3)); got != -1 {
		t.Fatalf("only an old-format record: CompletedRun %d, want -1", got)
	}
	if got := step(record(maxCompletionRun + 5)); got != 3 {
		t.Fatalf("CompletedRun %d, want 3", got)
	}
	if got := step(nil); got != maxCompletionRun {
		t.Fatalf("CompletedRun %d, want %d (a larger run is kept as the largest)", got, maxCompletionRun)
	}
	if got := step((*Lock).forgetCompletion); got != maxCompletionRun {
		t.Fatalf("CompletedRun %d before the forget", got)
	}
	if got := step(nil); got != -1 {
		t.Fatalf("after ForgetCompletion: CompletedRun %d, want -1", got)
	}
}

// TestRecordKeepsItsOwnWindow: a record written with a short window beside
// one kept for an hour (another task of the resource) does not cut the
// hour's: the set of a resource's records is kept as long as its longest
// window (issue 45, 5c: it expired at the latest writer's). On a
// redis-server, in real time.
func TestRecordKeepsItsOwnWindow(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	write := func(id string, window time.Duration) {
		t.Helper()
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, withCompletion(id, window))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.recordCompletion(0)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write("long", time.Hour)
	write("short", time.Second)
	time.Sleep(1500 * time.Millisecond)
	l, err := c.TryAcquire(ctx, "r", 5*time.Second, withCompletion("long", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	if l.completedRun() < 0 {
		t.Fatal("the hour's record gone once a 1s record of the resource expired")
	}
}
