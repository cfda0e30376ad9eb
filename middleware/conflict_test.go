package middleware

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const res = "task:stock:adjust:SKU-1"

func adjust() *asynq.Task { return task("stock:adjust", `{"sku":"SKU-1","delta":3}`) }

func TestHandlerRunsUnderItsLock(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
	var during string
	rec := &recorder{}
	rec.fn = func(ctx context.Context) error {
		during = e.holder(t, res)
		return nil
	}
	h := Lock(e.locks, ByField("sku"))(rec)
	if err := h.ProcessTask(context.Background(), adjust()); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 1 || len(rec.infos) != 1 {
		t.Fatalf("runs %d, lock infos %v", rec.count(), rec.infos)
	}
	li := rec.infos[0]
	if li.Resource != res || li.Token == "" || li.Token != during || li.Fence != 0 {
		t.Fatalf("lock info %+v, holder during the run %q", li, during)
	}
	if got := e.heldAfter(t, res); got != "" {
		t.Fatalf("lock still held by %q after the handler returned", got)
	}
}

func TestPolicies(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		policy  Option
		check   func(t *testing.T, err error, runs int, ev *events)
		release bool // the competitor releases once the task waits (else never)
	}{
		{"wait woken by release", Wait(5 * time.Second), func(t *testing.T, err error, runs int, ev *events) {
			if err != nil || runs != 1 {
				t.Fatalf("err %v, runs %d; want the task run once after the release", err, runs)
			}
			if e, ok := ev.find(kindAcquired, ""); !ok || e.Handover == "" {
				t.Fatalf("acquired event %+v: the task did not wait for the holder", e)
			}
		}, true},
		{"wait then requeue", Wait(200 * time.Millisecond), func(t *testing.T, err error, runs int, ev *events) {
			if !errors.Is(err, errConflict) || !errors.Is(err, redlock.ErrLocked) || runs != 0 {
				t.Fatalf("err %v, runs %d; want a requeue", err, runs)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("requeue error poses as the task's deadline: %v", err)
			}
			if IsFailure(err) {
				t.Fatal("a conflict counts as a failure")
			}
			if d := RetryDelay(0, err, adjust()); d < paceMinDelay || d > paceMaxDelay {
				t.Fatalf("retry delay %v for a conflict", d)
			}
		}, false},
		{"requeue", Requeue(), func(t *testing.T, err error, runs int, ev *events) {
			if !errors.Is(err, errConflict) || errors.Is(err, asynq.SkipRetry) || runs != 0 {
				t.Fatalf("err %v, runs %d", err, runs)
			}
			if e, ok := ev.find(kindConflict, "requeue"); !ok || e.Policy != "requeue" {
				t.Fatalf("no requeue conflict event: %+v", e)
			}
		}, false},
		{"skip", Skip(), func(t *testing.T, err error, runs int, ev *events) {
			if err != nil || runs != 0 {
				t.Fatalf("err %v, runs %d; want completed without running", err, runs)
			}
			if _, ok := ev.find(kindConflict, "skip"); !ok {
				t.Fatal("no skip event")
			}
		}, false},
		{"fail", Fail(), func(t *testing.T, err error, runs int, ev *events) {
			if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, errConflict) || runs != 0 {
				t.Fatalf("err %v, runs %d; want archived", err, runs)
			}
			if !strings.Contains(err.Error(), "stock:adjust") || !strings.Contains(err.Error(), "t1") {
				t.Fatalf("error %q does not name the task", err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Not about timing: patient clients (with a 100ms node
			// timeout, "wait then requeue" saw rounds and looks at the
			// holder miss it on a loaded machine under -race and end as an
			// outage, ErrQuorum; with 1s but 5ms-10ms retry delays, once),
			// and the release waits for the task to wait.
			e, held := patientBusyEnv(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
			var released atomic.Bool
			ev := &events{}
			rec := &recorder{fn: func(context.Context) error {
				if tc.release && !released.Load() {
					return errors.New("ran while the competitor held the lock")
				}
				return nil
			}}
			m, h := lockMW(t, e.locks, ByField("sku"), rec, tc.policy, WithObserver(ev.add))
			if tc.release {
				go func() {
					for deadline := time.Now().Add(10 * time.Second); m.stateOf(res).waiters == 0 && time.Now().Before(deadline); {
						time.Sleep(5 * time.Millisecond)
					}
					released.Store(true)
					_ = held.Release(ctx)
				}()
			} else {
				defer held.Release(ctx)
			}
			err := h.ProcessTask(ctx, adjust())
			tc.check(t, err, rec.count(), ev)
		})
	}
}

// TestWaitersPerResourceAreBounded: with the Wait policy, once the default
// two tasks wait for a busy resource, a third whose wait would be long (the
// resource's measured hold time times the tasks ahead reaches the Wait
// bound) is requeued at once instead of tying up another worker.
func TestWaitersPerResourceAreBounded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{fn: func(context.Context) error { time.Sleep(400 * time.Millisecond); return nil }}
	h := Lock(e.locks, ByField("sku"), Wait(time.Second))(rec)
	if err := h.ProcessTask(ctx, adjust()); err != nil { // measures a 400ms hold
		t.Fatal(err)
	}
	if h := e.heldAfter(t, res); h != "" {
		t.Fatalf("lock still held by %q after the task", h)
	}
	held, err := e.other.TryAcquire(ctx, res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	waiting := make(chan error, 2)
	for range 2 {
		go func() { waiting <- h.ProcessTask(ctx, adjust()) }()
	}
	time.Sleep(200 * time.Millisecond) // both tasks are waiting
	err = h.ProcessTask(ctx, adjust())
	if !errors.Is(err, errConflict) {
		t.Fatalf("third task: %v, want an immediate requeue", err)
	}
	select {
	case err := <-waiting:
		t.Fatalf("a waiter ended (%v) before the third task was requeued: the third one waited", err)
	default:
	}
	for range 2 {
		if err := <-waiting; !errors.Is(err, errConflict) {
			t.Fatalf("waiter: %v", err)
		}
	}
}

// TestShortWaitPastTheBound: without parking, a third task still waits when
// the tasks ahead of it should be done soon (short holds): a requeue would
// keep it away for seconds. It gets the lock when the holder releases.
func TestShortWaitPastTheBound(t *testing.T) {
	ctx := context.Background()
	e, held := busyEnv(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), Wait(10*time.Second))(rec)
	done := make(chan error, 3)
	for range 3 {
		go func() { done <- h.ProcessTask(ctx, adjust()) }()
	}
	time.Sleep(300 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("task: %v, want all three run after the release", err)
		}
	}
	if rec.count() != 3 {
		t.Fatalf("%d runs, want 3", rec.count())
	}
}

// TestConflictOnLastRetryIsNeverArchived: with MaxRetry(0) (or on the last
// retry) asynq archives on any error. With a broker the task is parked all
// the same: its run ends with a conflict (no failure, no revoke), asynq
// keeps it archived under its own ID, and it is brought back to its queue
// (RunTask) after its backstop, by that park only. Without a broker it
// waits for the lock within its deadline.
func TestConflictOnLastRetryIsNeverArchived(t *testing.T) {
	ctx := context.Background()
	t.Run("parked in the archive, brought back", func(t *testing.T) {
		e, _ := busyEnv(t, taskMeta{id: "abc", queue: "critical", retried: 2, maxRetry: 2, known: true})
		insp := &fakeInspector{}
		rec := &recorder{}
		h := Lock(e.locks, ByField("sku"), Requeue(), WithBroker(e.raw), withInspector(insp), withBackstop(200*time.Millisecond))(rec)
		err := h.ProcessTask(ctx, adjust())
		if !errors.Is(err, errConflict) || IsFailure(err) || errors.Is(err, asynq.RevokeTask) || errors.Is(err, asynq.SkipRetry) || rec.count() != 0 {
			t.Fatalf("err %v, runs %d; want a conflict, the task parked", err, rec.count())
		}
		// As asynq archives it: its hash (read by the promotion) and what its
		// inspector shows.
		e.raw.HSet(ctx, queuePrefix("critical")+"t:abc", "state", "archived", "msg", err.Error())
		insp.set("critical", "abc", asynq.TaskStateArchived, err.Error())
		if n := e.raw.LLen(ctx, fifoKey("critical", res)).Val(); n != 1 {
			t.Fatalf("%d park records, want 1", n)
		}
		// Another task archived for another reason is not touched.
		withMeta(t, taskMeta{id: "def", queue: "critical", retried: 0, maxRetry: 0, known: true})
		err = h.ProcessTask(ctx, adjust())
		e.raw.HSet(ctx, queuePrefix("critical")+"t:def", "state", "archived", "msg", "some failure")
		insp.set("critical", "def", asynq.TaskStateArchived, "some failure")
		if !errors.Is(err, errConflict) {
			t.Fatalf("second task: %v", err)
		}
		waitFor(t, "the parked task brought back from the archive", func() bool { return len(insp.runs()) > 0 })
		time.Sleep(500 * time.Millisecond)
		if got := insp.runs(); !slices.Equal(got, []string{"critical/abc"}) {
			t.Fatalf("brought back %v, want [critical/abc]", got)
		}
	})
	// The broker refuses the park record (and asynq archives the task all
	// the same, as it would once the broker is back): the process that
	// parked it brings it back by itself.
	t.Run("brought back without its record", func(t *testing.T) {
		e, _ := busyEnv(t, taskMeta{id: "abc", queue: "critical", retried: 0, maxRetry: 0, known: true})
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { _ = dead.Close() })
		insp := &fakeInspector{}
		h := Lock(e.locks, ByField("sku"), Requeue(), WithBroker(dead), withInspector(insp),
			withBackstop(200*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))(&recorder{})
		err := h.ProcessTask(ctx, adjust())
		if !errors.Is(err, errConflict) || IsFailure(err) {
			t.Fatalf("err %v; want a conflict", err)
		}
		insp.set("critical", "abc", asynq.TaskStateArchived, err.Error())
		waitFor(t, "the task brought back from the archive", func() bool { return len(insp.runs()) == 1 })
	})
	// A Timeout shorter than the wait: the wait ends shortly before the
	// task's deadline with a conflict, which keeps its retry count, not with
	// the deadline (a failure to asynq, which consumes it or archives).
	t.Run("a wait ends before the deadline with a conflict", func(t *testing.T) {
		e, _ := busyEnv(t, taskMeta{id: "abc", retried: 0, maxRetry: 5, known: true})
		rec := &recorder{}
		h := Lock(e.locks, ByField("sku"), Wait(10*time.Second))(rec)
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := h.ProcessTask(tctx, adjust())
		if !errors.Is(err, errConflict) || IsFailure(err) || tctx.Err() != nil || rec.count() != 0 {
			t.Fatalf("err %v (deadline passed: %v), runs %d; want a conflict before the deadline", err, tctx.Err(), rec.count())
		}
	})
	t.Run("waits without a broker", func(t *testing.T) {
		e, held := busyEnv(t, taskMeta{id: "abc", retried: 3, maxRetry: 3, known: true})
		time.AfterFunc(300*time.Millisecond, func() { _ = held.Release(ctx) })
		rec := &recorder{}
		h := Lock(e.locks, ByField("sku"), Requeue())(rec)
		if err := h.ProcessTask(ctx, adjust()); err != nil || rec.count() != 1 {
			t.Fatalf("err %v, runs %d; want the task run once the lock was free", err, rec.count())
		}
	})
}

// TestQuorumLossNeverSkipsOrFails: with the lock nodes unreachable, Skip
// and Fail must not drop or archive the task: it is requeued, and it is not
// a failure.
func TestQuorumLossNeverSkipsOrFails(t *testing.T) {
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	dead, err := redlock.NewFromURLs([]string{"redis://127.0.0.1:1"}, redlock.WithNodeTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	for i, p := range []Option{Skip(), Fail(), Requeue(), Wait(50 * time.Millisecond)} {
		rec := &recorder{}
		err := Lock(dead, ByField("sku"), p)(rec).ProcessTask(context.Background(), adjust())
		if !errors.Is(err, errConflict) || !errors.Is(err, redlock.ErrQuorum) || errors.Is(err, asynq.SkipRetry) || IsFailure(err) || rec.count() != 0 {
			t.Fatalf("policy %d with the quorum lost: %v (runs %d); want a requeue", i, err, rec.count())
		}
	}
}

// TestLockClientErrorsAreFailures: an error that is neither a conflict nor a
// lost quorum (a closed client) is an ordinary failure, not a conflict.
func TestLockClientErrorsAreFailures(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	_ = e.locks.Close()
	err := Lock(e.locks, ByField("sku"))(&recorder{}).ProcessTask(context.Background(), adjust())
	if !errors.Is(err, redis.ErrClosed) || errors.Is(err, errConflict) || !IsFailure(err) {
		t.Fatalf("closed client: %v; want a failure, not a conflict", err)
	}
}
