package middleware

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// deliver runs the task with id and payload through h as asynq would
// deliver it.
func deliver(t *testing.T, h func() error, id string) error {
	t.Helper()
	withMeta(t, taskMeta{id: id, queue: "default", maxRetry: 3, known: true})
	return h()
}

// TestRedeliveryOfACompletedTaskIsSkipped: a task whose handler returned nil
// is not run again when it is delivered again (its ID, type and payload),
// and the skip is reported; with records off (the control) it runs twice.
func TestRedeliveryOfACompletedTaskIsSkipped(t *testing.T) {
	for _, window := range []time.Duration{time.Hour, 0} {
		e := newEnv(t)
		var evs events
		rec := &recorder{}
		h := Lock(e.locks, ByField("sku"), WithCompletionWindow(window), WithObserver(evs.add))(rec)
		run := func() error { return h.ProcessTask(context.Background(), adjust()) }
		for range 2 {
			if err := deliver(t, run, "t1"); err != nil {
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
		_, skipped := evs.find(EventRedeliverySkipped, "")
		if skipped != (window > 0) {
			t.Fatalf("window %v: skip reported %v", window, skipped)
		}
		if window > 0 && e.holder(t, "task:stock:adjust:SKU-1") != "" {
			t.Fatal("the skipped delivery left its lock held")
		}
	}
}

// TestFailedRunLeavesNoRecord: a handler that failed, or whose lock was
// lost, is run again on its retry; once it succeeds it is not run again.
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
	for range 2 {
		if err := deliver(t, run, "t1"); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("%d runs, want 2: the failed one, then the retry once", runs)
	}
}

// TestParkedCopyCountsAsItsOriginal: a copy "id~r1" that completed stands
// for its original: the original delivered again is not run, nor is a later
// copy; a task reusing the ID with another payload is other work and runs.
func TestParkedCopyCountsAsItsOriginal(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithCompletionWindow(time.Hour))(rec)
	run := func() error { return h.ProcessTask(context.Background(), adjust()) }
	for _, id := range []string{"abc~r1", "abc", "abc~r2"} {
		if err := deliver(t, run, id); err != nil {
			t.Fatal(err)
		}
	}
	if rec.count() != 1 {
		t.Fatalf("%d runs of a task and its copies, want 1", rec.count())
	}
	other := func() error {
		return h.ProcessTask(context.Background(), task("stock:adjust", `{"sku":"SKU-1","qty":2}`))
	}
	if err := deliver(t, other, "abc"); err != nil || rec.count() != 2 {
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
	for _, d := range []time.Duration{-time.Second, redlock.MaxCompletionWindow + time.Hour} {
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
