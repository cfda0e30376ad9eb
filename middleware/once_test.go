package middleware

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// deliver runs the task with id through h as asynq would deliver it on its
// first try.
func deliver(t *testing.T, h func() error, id string) error {
	t.Helper()
	return deliverTry(t, h, id, 0)
}

// deliverTry runs it as asynq's delivery with retry count retried.
func deliverTry(t *testing.T, h func() error, id string, retried int) error {
	t.Helper()
	withMeta(t, taskMeta{id: id, queue: "default", retried: retried, maxRetry: 25, known: true})
	return h()
}

// TestRedeliveryOfACompletedTaskIsSkipped: a task whose handler returned nil
// is not run again when asynq delivers that run again (asynq's recoverer
// brings it back with its retry count one up), and the skip is reported;
// with records off (the control) it runs twice.
func TestRedeliveryOfACompletedTaskIsSkipped(t *testing.T) {
	for _, window := range []time.Duration{time.Hour, 0} {
		e := newEnv(t)
		var evs events
		rec := &recorder{}
		h := Lock(e.locks, ByField("sku"), WithCompletionWindow(window), WithObserver(evs.add))(rec)
		run := func() error { return h.ProcessTask(context.Background(), adjust()) }
		for try := range 2 {
			if err := deliverTry(t, run, "t1", try); err != nil {
				t.Fatal(err)
			}
		}
		want := 1
		if window == 0 {
			want = 2
		}
		if rec.count() != want {
			t.Fatalf("window %v: %d runs of one task delivered twice, want %d", window, rec.count(), want)
		}
		_, skipped := evs.find(kindRedeliverySkipped, "")
		if skipped != (window > 0) {
			t.Fatalf("window %v: skip reported %v", window, skipped)
		}
		if window > 0 {
			// The release is sent as the task returns, answered after.
			waitFor(t, "the skipped delivery's lock released", func() bool { return e.holder(t, "task:stock:adjust:SKU-1") == "" })
		}
	}
}

// TestReusedIDRuns: a record names one run of one enqueue. A fresh enqueue
// reusing the ID and payload (its retry count from 0) runs, as does an
// operator's re-run (Inspector.RunTask keeps the count); each of their
// re-deliveries is skipped. The fresh enqueue's failed first run does not
// leave the earlier record to skip its retry.
func TestReusedIDRuns(t *testing.T) {
	e := newEnv(t)
	fail := errors.New("store down")
	runs := 0
	rec := &recorder{fn: func(context.Context) error {
		runs++
		if runs == 3 {
			return fail
		}
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithCompletionWindow(time.Hour))(rec)
	run := func() error { return h.ProcessTask(context.Background(), adjust()) }
	for i, d := range []struct {
		retried, runs int
		err           error
	}{
		{0, 1, nil},  // the first enqueue
		{1, 1, nil},  // its re-delivery: skipped
		{0, 2, nil},  // an operator's re-run of it (RunTask: same count)
		{0, 3, fail}, // a fresh enqueue under the ID: runs, and fails
		{1, 4, nil},  // its retry runs: the old record is gone
		{2, 4, nil},  // the retry's re-delivery: skipped
	} {
		if err := deliverTry(t, run, "report-R", d.retried); !errors.Is(err, d.err) || runs != d.runs {
			t.Fatalf("delivery %d (retry count %d): %v, %d runs; want %v, %d runs", i, d.retried, err, runs, d.err, d.runs)
		}
	}
}

// TestFailedRunLeavesNoRecord: a handler that failed is run again on its
// retry; once it succeeds, a re-delivery of that run is not run again.
func TestFailedRunLeavesNoRecord(t *testing.T) {
	e := newEnv(t)
	fail := errors.New("store down")
	var runs int
	rec := &recorder{fn: func(context.Context) error {
		runs++
		if runs == 1 {
			return fail
		}
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithCompletionWindow(time.Hour))(rec)
	run := func() error { return h.ProcessTask(context.Background(), adjust()) }
	if err := deliver(t, run, "t1"); !errors.Is(err, fail) {
		t.Fatalf("first run: %v", err)
	}
	for try := 1; try <= 2; try++ {
		if err := deliverTry(t, run, "t1", try); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("%d runs, want 2: the failed one, then the retry once", runs)
	}
}

// TestParkedCopyCountsAsItsOriginal: a copy "id~r1" made by its original's
// delivery of run 2 (retriedHeader) counts on from it: its completion
// skips the original delivered again after that (run 3), and the copy's own
// re-delivery; a task reusing the ID with another payload is other work and
// runs.
func TestParkedCopyCountsAsItsOriginal(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithCompletionWindow(time.Hour))(rec)
	cp := asynq.NewTaskWithHeaders("stock:adjust", adjust().Payload(), map[string]string{retriedHeader: "2"})
	runCopy := func() error { return h.ProcessTask(context.Background(), cp) }
	run := func() error { return h.ProcessTask(context.Background(), adjust()) }
	for _, d := range []struct {
		id      string
		h       func() error
		retried int
	}{{"abc~r1", runCopy, 0}, {"abc", run, 3}, {"abc~r1", runCopy, 1}} {
		if err := deliverTry(t, d.h, d.id, d.retried); err != nil {
			t.Fatal(err)
		}
	}
	if rec.count() != 1 {
		t.Fatalf("%d runs of a task and its copies, want 1", rec.count())
	}
	other := func() error {
		return h.ProcessTask(context.Background(), task("stock:adjust", `{"sku":"SKU-1","qty":2}`))
	}
	if err := deliverTry(t, other, "abc", 5); err != nil || rec.count() != 2 {
		t.Fatalf("the ID reused for other work: %v, %d runs; want it run", err, rec.count())
	}
}

// TestLostLockLeavesNoRecord: a handler that returned nil after its lock
// was lost leaves no record, so the task runs again.
func TestLostLockLeavesNoRecord(t *testing.T) {
	e := newEnv(t)
	runs := 0
	rec := &recorder{fn: func(ctx context.Context) error {
		runs++
		if runs == 1 {
			li, _ := LockFromContext(ctx)
			e.raw.Del(ctx, "asynqlock:{"+li.Resource+"}") // the node lost the key
			<-ctx.Done()
		}
		return nil
	}}
	h := Lock(e.locks, ByField("sku"), WithCompletionWindow(time.Hour), WithTTL(time.Second))(rec)
	run := func() error { return h.ProcessTask(context.Background(), adjust()) }
	if err := deliver(t, run, "t1"); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("first run: %v, want ErrLockLost", err)
	}
	if err := deliver(t, run, "t1"); err != nil || runs != 2 {
		t.Fatalf("the retry: %v after %d runs; want it run", err, runs)
	}
}

// TestCompletionWindowRefusesBadValues: a negative window or one above the
// lock client's maximum is refused where it is given.
func TestCompletionWindowRefusesBadValues(t *testing.T) {
	e := newEnv(t)
	for _, d := range []time.Duration{-time.Second, lockutil.MaxCompletionWindow + time.Hour} {
		if _, err := New(e.locks, ByField("sku"), WithCompletionWindow(d)); err == nil {
			t.Errorf("window %v accepted", d)
		}
	}
}

// TestOriginalID: a copy's suffix "~rN" is dropped, other text is kept.
func TestOriginalID(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "abc~r1": "abc", "abc~r12": "abc", "abc~rx": "abc~rx", "~r1": "~r1", "a~r1~r2": "a~r1"} {
		if got := originalID(in); got != want {
			t.Errorf("originalID(%q) = %q, want %q", in, got, want)
		}
	}
}
