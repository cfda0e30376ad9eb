package middleware

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// lastRetryBroker is the scene of the late-copy tests: task "abc" on its
// last retry (running, as the broker sees it) meets its resource held by
// another client; a fake broker (see fakeBroker) whose first two enqueues,
// the resubmission's tries, fail and stay on their way until landed; and
// the middleware h around rec, given that broker.
func lastRetryBroker(t *testing.T) (e *env, held *redlock.Lock, b *fakeBroker, rec *recorder, h asynq.Handler) {
	t.Helper()
	e, lock := busyEnv(t, taskMeta{id: "abc", queue: "default", maxRetry: 0, known: true})
	b = newFakeBroker()
	b.failEnqueues = 2
	b.store(&brokerTask{task: adjust(), id: "abc", state: asynq.TaskStateActive})
	rec = &recorder{}
	h = Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), withEnqueuer(b), withInspector(b))(rec)
	return e, lock, b, rec, h
}

// TestCopyLandingAfterTheChecksRunsOnce (issue 20, suspicion 4, the last
// interleaving): on its last retry a busy task's resubmission fails twice,
// the task goes on to run itself, and both failed enqueues land in the
// broker late: after every check the original made, while its handler
// runs. Once the original is done, the broker's tasks run as a server
// would run them. The task must have run exactly once: a copy stored that
// late would run it a second time (it did before the copy's ID was
// claimed: "the task ran 2 times (broker holds [abc~r1])").
func TestCopyLandingAfterTheChecksRunsOnce(t *testing.T) {
	ctx := context.Background()
	e, held, b, rec, h := lastRetryBroker(t)
	b.onEnqueue = func(call int) {
		if call == 2 { // the resubmission's last try: free the resource for the wait
			_ = held.Release(ctx)
		}
	}
	rec.fn = func(context.Context) error {
		if rec.count() == 1 {
			b.land() // the original passed its checks and runs
		}
		return nil
	}
	if err := h.ProcessTask(ctx, adjust()); err != nil || rec.count() != 1 {
		t.Fatalf("original: err %v, runs %d; want it run once by itself", err, rec.count())
	}
	b.runAll(t, h)
	if n := rec.count(); n != 1 {
		t.Fatalf("the task ran %d times (broker holds %v): a copy whose failed enqueue landed after the original's checks ran it again", n, b.stored())
	}
	if b.refused != 2 {
		t.Fatalf("%d late enqueues refused by the broker, want both", b.refused)
	}
	if tok := e.heldAfter(t, res); tok != "" {
		t.Fatalf("lock left held by %q", tok)
	}
}

// TestLateCopyBeforeTheClaim: the failed resubmission's copy lands before
// the original claims its ID, and then is pending, or has run and
// completed (issue 20, suspicion 4: a completed copy must not read as
// never stored). Either way the copy carries the task: the original is
// revoked without running, and the task runs once in all.
func TestLateCopyBeforeTheClaim(t *testing.T) {
	for _, ranFirst := range []bool{false, true} {
		name := map[bool]string{false: "pending", true: "completed"}[ranFirst]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e, held, b, rec, h := lastRetryBroker(t)
			b.onEnqueue = func(call int) {
				if call != 3 { // the claim's first try
					return
				}
				b.land()
				_ = held.Release(ctx)
				if ranFirst {
					b.runAll(t, h) // the copy runs and completes first
				}
			}
			err := h.ProcessTask(ctx, adjust())
			if !errors.Is(err, asynq.RevokeTask) {
				t.Fatalf("original: err %v, want it revoked: its copy was stored", err)
			}
			b.runAll(t, h)
			if n := rec.count(); n != 1 {
				t.Fatalf("the task ran %d times (broker holds %v), want once, by its copy", n, b.stored())
			}
			if got := b.stored(); !slices.Equal(got, []string{"abc", "abc~r1"}) {
				t.Fatalf("broker holds %v, want the original and its copy, no marker", got)
			}
			if tok := e.heldAfter(t, res); tok != "" {
				t.Fatalf("lock left held by %q", tok)
			}
		})
	}
}

// TestMarkerReplyLost: the marker that claims the copy's ID is stored but
// its reply is lost; the next try conflicts, and the lookup finds the
// marker, not a copy: the original runs, once, and the marker, run by a
// server, runs nothing.
func TestMarkerReplyLost(t *testing.T) {
	ctx := context.Background()
	_, held, b, rec, h := lastRetryBroker(t)
	b.lostReplies = 1
	b.onEnqueue = func(call int) {
		if call == 2 {
			_ = held.Release(ctx)
		}
	}
	if err := h.ProcessTask(ctx, adjust()); err != nil || rec.count() != 1 {
		t.Fatalf("original: err %v, runs %d; want it run once", err, rec.count())
	}
	b.land()
	b.runAll(t, h)
	info, err := b.GetTaskInfo("default", "abc~r1")
	if err != nil || !isMarker(info) || info.State != asynq.TaskStateCompleted || info.Retention <= 0 {
		t.Fatalf("under the copy's ID: %+v, %v; want the marker, completed and kept", info, err)
	}
	if rec.count() != 1 || b.refused != 2 {
		t.Fatalf("runs %d, late copies refused %d; want 1 run and both refused", rec.count(), b.refused)
	}
}

// TestMarkerDoesNotBlockItsOriginal: the original claims its copy's ID,
// then ends before it gets its lock (a shutdown), and asynq delivers it
// again. The marker is no copy: the new delivery runs the task itself when
// the lock is free, or resubmits it past the marker (a copy stored under
// the marker's ID could never be told from it) when it is busy. Late copies
// of the first delivery stay refused; the task runs once.
func TestMarkerDoesNotBlockItsOriginal(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock free", true: "lock busy"}[busy], func(t *testing.T) {
			ctx, shutdown := context.WithCancel(context.Background())
			_, held, b, rec, h := lastRetryBroker(t)
			b.onEnqueue = func(call int) {
				if call == 3 { // the claim: the server shuts down meanwhile
					shutdown()
				}
			}
			if err := h.ProcessTask(ctx, adjust()); err == nil || errors.Is(err, asynq.RevokeTask) || rec.count() != 0 {
				t.Fatalf("first delivery: err %v, runs %d; want it ended unrun", err, rec.count())
			}
			if !busy {
				_ = held.Release(context.Background())
			}
			err := h.ProcessTask(context.Background(), adjust())
			if busy != errors.Is(err, asynq.RevokeTask) || err != nil && !busy {
				t.Fatalf("second delivery: err %v (busy %v)", err, busy)
			}
			b.land()
			_ = held.Release(context.Background())
			b.runAll(t, h)
			if n := rec.count(); n != 1 || b.refused != 2 {
				t.Fatalf("the task ran %d times (broker holds %v), %d late copies refused; want once, both refused", n, b.stored(), b.refused)
			}
		})
	}
}

// TestParkedCopyFailureKeepsItsID: with a broker, a busy task on its last
// retry is parked as a copy; that resubmission fails, and the usual
// last-retry path takes over. Its copy lands late all the same and runs to
// completion before that path resubmits: the path must resubmit under the
// same ID, where the completed copy shows as this run's copy, not step over
// it to a new ID as if it were left by an earlier run (the task would then
// run twice).
func TestParkedCopyFailureKeepsItsID(t *testing.T) {
	ctx := context.Background()
	e, held := busyEnv(t, taskMeta{id: "abc", queue: "default", maxRetry: 0, known: true})
	b := newFakeBroker()
	b.failEnqueues = 2
	b.store(&brokerTask{task: adjust(), id: "abc", state: asynq.TaskStateActive})
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), WithBroker(e.raw), withEnqueuer(b), withInspector(b))(rec)
	b.onEnqueue = func(call int) {
		if call == 2 { // the first try landed; it runs to completion
			b.land()
			_ = held.Release(ctx)
			b.runAll(t, h)
		}
	}
	if err := h.ProcessTask(ctx, adjust()); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("original: err %v, want it revoked: its copy ran", err)
	}
	b.land()
	b.runAll(t, h)
	if n := rec.count(); n != 1 {
		t.Fatalf("the task ran %d times (broker holds %v), want once, by its first copy", n, b.stored())
	}
}

// TestMarkerIsNeverTakenForACopy: a delivery of the task meets the marker
// an earlier delivery left under its copy's ID, and the lookup that would
// have stepped over it fails. The resubmission then conflicts with the
// marker: that is no copy stored (revoking the run would lose the task).
// The marker holds the ID against any copy, so the run does the work.
func TestMarkerIsNeverTakenForACopy(t *testing.T) {
	ctx := context.Background()
	_, held, b, rec, h := lastRetryBroker(t)
	b.failEnqueues, b.failLookups = 0, 1
	b.store(&brokerTask{task: asynq.NewTaskWithHeaders("stock:adjust", nil, map[string]string{markerHeader: "abc"}),
		id: "abc~r1", state: asynq.TaskStateCompleted})
	b.onEnqueue = func(int) { _ = held.Release(ctx) }
	if err := h.ProcessTask(ctx, adjust()); err != nil || rec.count() != 1 {
		t.Fatalf("err %v, runs %d; want the task run by this delivery (broker holds %v)", err, rec.count(), b.stored())
	}
}
