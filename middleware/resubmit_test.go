package middleware

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestCopyRetention: a copy is kept as long as the resubmitting run may
// still look for it (its deadline), and a margin.
func TestCopyRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if got := copyRetention(ctx); got <= 10*time.Minute || got > 10*time.Minute+copyKeepMargin {
		t.Fatalf("copyRetention with 10m left = %v", got)
	}
	if got := copyRetention(context.Background()); got != copyKeepDefault+copyKeepMargin {
		t.Fatalf("copyRetention without a deadline = %v", got)
	}
}

// TestResubmitStepsOverFinishedCopies (issue 20, suspicion 5): an operator
// runs an archived task again while a copy from its earlier run is still in
// the broker under the derived ID. A finished copy (archived, or completed
// and kept) is no copy of this run: the run is resubmitted under the next
// free ID instead of taking the conflict for "stored" and enqueueing
// nothing. A live copy still counts as this run's, stored earlier.
func TestResubmitStepsOverFinishedCopies(t *testing.T) {
	cases := []struct {
		name   string
		states map[string]asynq.TaskState // by copy ID, already in the broker
		want   []string                   // the copies stored at the end
	}{
		{"archived copy", map[string]asynq.TaskState{"abc~r1": asynq.TaskStateArchived}, []string{"abc~r1", "abc~r2"}},
		{"completed copy kept", map[string]asynq.TaskState{"abc~r1": asynq.TaskStateCompleted}, []string{"abc~r1", "abc~r2"}},
		{"two finished generations", map[string]asynq.TaskState{"abc~r1": asynq.TaskStateCompleted, "abc~r2": asynq.TaskStateArchived},
			[]string{"abc~r1", "abc~r2", "abc~r3"}},
		{"live copy (control)", map[string]asynq.TaskState{"abc~r1": asynq.TaskStateScheduled}, []string{"abc~r1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := busyEnv(t, taskMeta{id: "abc", queue: "default", retried: 2, maxRetry: 2, known: true})
			enq := &fakeEnqueuer{}
			insp := &fakeInspector{tasks: map[string]asynq.TaskInfo{}}
			for id, st := range tc.states {
				enq.ids = append(enq.ids, id)
				insp.tasks["default/"+id] = asynq.TaskInfo{ID: id, State: st}
			}
			slices.Sort(enq.ids)
			rec := &recorder{}
			err := Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), withEnqueuer(enq), withInspector(insp))(rec).ProcessTask(context.Background(), adjust())
			if !errors.Is(err, asynq.RevokeTask) || rec.count() != 0 {
				t.Fatalf("err %v, runs %d: want the run revoked after resubmitting", err, rec.count())
			}
			if got := enq.stored(); !slices.Equal(got, tc.want) {
				t.Fatalf("copies %v, want %v", got, tc.want)
			}
		})
	}
}

// logCapture keeps every record logged, at every level.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCapture) WithGroup(string) slog.Handler            { return c }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}

// lines returns "LEVEL msg key=value ..." of the records at min or above.
func (c *logCapture) lines(min slog.Level) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		if r.Level < min {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// count returns how many lines contain part.
func count(lines []string, part string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, part) {
			n++
		}
	}
	return n
}

// TestFailedResubmissionLogsOncePerChangeOfState: busy tasks on their last
// retry whose resubmissions fail, one after another, make one line at Warn
// or above, with the cause, not one per task (each task's outcome is at
// Debug, and the observer sees every one); the first resubmission that
// works again makes one recovery line at Info.
func TestFailedResubmissionLogsOncePerChangeOfState(t *testing.T) {
	const failing = 5
	e, _ := busyEnv(t, taskMeta{id: "abc", queue: "default", retried: 0, maxRetry: 0, known: true})
	logs := &logCapture{}
	enq := &fakeEnqueuer{err: errors.New("broker down")}
	var evs events
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), withEnqueuer(enq),
		WithLogger(slog.New(logs)), WithObserver(evs.add))(rec)
	ctx := context.Background()
	for i := range failing {
		// No inspector: the copy's ID cannot be claimed either, and the
		// run fails (asynq archives it), as in TestLastRetry.
		if err := h.ProcessTask(ctx, adjust()); err == nil || errors.Is(err, asynq.RevokeTask) {
			t.Fatalf("task %d: err %v; want the run failed", i, err)
		}
	}
	warn := logs.lines(slog.LevelWarn)
	if len(warn) != 1 || !strings.HasPrefix(warn[0], "WARN cannot resubmit busy tasks") || !strings.Contains(warn[0], "err=broker down") || !strings.Contains(warn[0], "resource="+res) {
		t.Fatalf("lines at Warn and above after %d failed resubmissions: %q; want exactly one, naming the cause", failing, warn)
	}
	// Control: each task's outcome was logged, at Debug.
	if n := count(logs.lines(slog.LevelDebug), "DEBUG could not resubmit a busy task on its last retry"); n != failing {
		t.Fatalf("%d per-task Debug lines, want %d", n, failing)
	}

	enq.mu.Lock()
	enq.err = nil
	enq.mu.Unlock()
	if err := h.ProcessTask(ctx, adjust()); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("err %v; want the run revoked, its copy resubmitted", err)
	}
	info := logs.lines(slog.LevelInfo)
	if len(info) != 2 || info[0] != warn[0] || !strings.HasPrefix(info[1], "INFO resubmitting busy tasks on their last retry again") {
		t.Fatalf("lines at Info and above: %q; want the failure's line, then one recovery line", info)
	}
	evs.mu.Lock()
	defer evs.mu.Unlock()
	resubmits := 0
	for _, ev := range evs.ev {
		if ev.Kind == EventConflict && ev.Action == "resubmit" {
			resubmits++
		}
	}
	if resubmits != failing+1 {
		t.Fatalf("%d resubmit events, want %d: the observer sees every one", resubmits, failing+1)
	}
}

// TestFailedLookupLogsOncePerChangeOfState: a broker whose lookups fail
// while its enqueues work resubmits each busy task without its timeout,
// deadline and retention; the operator sees that once, not per task, and
// once more when lookups work again.
func TestFailedLookupLogsOncePerChangeOfState(t *testing.T) {
	const failing = 5
	e, _ := busyEnv(t, taskMeta{id: "abc", queue: "default", retried: 0, maxRetry: 0, known: true})
	logs := &logCapture{}
	insp := &fakeInspector{tasks: map[string]asynq.TaskInfo{"default/abc": {ID: "abc", Queue: "default"}}, err: errors.New("lookups down")}
	h := Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), withEnqueuer(&fakeEnqueuer{}), withInspector(insp),
		WithLogger(slog.New(logs)))(&recorder{})
	ctx := context.Background()
	for i := range failing {
		if err := h.ProcessTask(ctx, adjust()); !errors.Is(err, asynq.RevokeTask) {
			t.Fatalf("task %d: err %v; want the run revoked, its copy resubmitted", i, err)
		}
	}
	warn := logs.lines(slog.LevelWarn)
	if n := count(warn, "WARN resubmitting busy tasks without their timeout"); n != 1 || !strings.Contains(warn[0], "err=lookups down") {
		t.Fatalf("lines at Warn and above after %d failed lookups: %q; want exactly one about them, naming the cause", failing, warn)
	}
	// Control: each task's lookup failure was logged, at Debug.
	if n := count(logs.lines(slog.LevelDebug), "DEBUG resubmitting without the task's timeout"); n != failing {
		t.Fatalf("%d per-task Debug lines, want %d", n, failing)
	}
	insp.mu.Lock()
	insp.err = nil
	insp.mu.Unlock()
	if err := h.ProcessTask(ctx, adjust()); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("err %v; want the run revoked", err)
	}
	if n := count(logs.lines(slog.LevelInfo), "INFO looking up busy tasks to resubmit works again"); n != 1 {
		t.Fatalf("lines at Info and above: %q; want one recovery line", logs.lines(slog.LevelInfo))
	}
}
