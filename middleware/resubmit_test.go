package middleware

import (
	"context"
	"errors"
	"slices"
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
