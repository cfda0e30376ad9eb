package middleware

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// lateCopyInspector is a fakeInspector on which a resubmitted copy whose
// enqueue failed lands late: right after the first lookup of the copy that
// follows the failed enqueues (copyAbsent's), it is stored and runs to
// completion, and then the resource is freed. As on asynq, a completed copy
// stays findable only if it was enqueued with a retention.
type lateCopyInspector struct {
	*fakeInspector
	enq    *fakeEnqueuer
	copyID string
	free   func()
	once   sync.Once
}

func (l *lateCopyInspector) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	info, err := l.fakeInspector.GetTaskInfo(queue, id)
	l.enq.mu.Lock()
	failed := slices.Clone(l.enq.failed)
	l.enq.mu.Unlock()
	if id == l.copyID && len(failed) == 2 {
		l.once.Do(func() { l.land(queue, failed[0]) })
	}
	return info, err
}

// land stores the copy late and completes it, then frees the resource.
func (l *lateCopyInspector) land(queue string, opts []asynq.Option) {
	if ret, _ := optionValues(opts)[asynq.RetentionOpt].(time.Duration); ret > 0 {
		l.mu.Lock()
		l.tasks[queue+"/"+l.copyID] = asynq.TaskInfo{ID: l.copyID, State: asynq.TaskStateCompleted, Retention: ret}
		l.mu.Unlock()
	}
	l.free()
}

// TestLateCopyCompletedFirstRunsOnce (issue 20, suspicion 4): on its last
// retry a busy task's resubmission fails, the copy is confirmed absent and
// the task waits for its lock; the enqueue lands late all the same, and the
// copy runs and completes before the original gets its lock. The original
// must see that the copy did the work, not take "not found" for "never
// stored" and run the task a second time.
func TestLateCopyCompletedFirstRunsOnce(t *testing.T) {
	ctx := context.Background()
	e, held := busyEnv(t, taskMeta{id: "abc", queue: "default", retried: 0, maxRetry: 0, known: true})
	enq := &fakeEnqueuer{err: errors.New("read tcp: i/o timeout")}
	insp := &lateCopyInspector{
		fakeInspector: &fakeInspector{tasks: map[string]asynq.TaskInfo{}},
		enq:           enq, copyID: "abc~r1",
		free: func() { _ = held.Release(ctx) },
	}
	rec := &recorder{}
	err := Lock(e.locks, ByField("sku"), WithPolicy(Requeue()), withEnqueuer(enq), withInspector(insp))(rec).ProcessTask(ctx, adjust())
	if len(enq.failed) != 2 {
		t.Fatalf("%d failed enqueues, want 2: the test did not force the failure", len(enq.failed))
	}
	if rec.count() != 0 || !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("the original ran %d time(s) (err %v) after its copy completed: want it revoked, the task applied once", rec.count(), err)
	}
	if tok := e.holder(t, res); tok != "" {
		t.Fatalf("lock left held by %q", tok)
	}
}

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
