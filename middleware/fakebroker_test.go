package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// fakeBroker is one asynq broker behind both the enqueuer and the inspector,
// as asynq's client and inspector share their Redis: one queue of tasks by
// ID, where a second task under a taken ID is refused (ErrTaskIDConflict),
// as asynq's enqueue script refuses it, atomically. The first failEnqueues
// enqueues fail and are held, as requests still on their way: land stores
// them late, as the broker would run them (refused on a taken ID). With
// lostReplies n, the n enqueues that follow store their task but report
// errLostReply. With failLookups n, the first n lookups fail.
type fakeBroker struct {
	mu           sync.Mutex
	tasks        map[string]*brokerTask
	order        []string // IDs in the order they were stored
	failEnqueues int
	failLookups  int // the first n lookups fail
	lostReplies  int
	calls        int
	held         []*brokerTask // failed enqueues not landed yet
	refused      int           // late enqueues that landed on a taken ID
	// onEnqueue, if set, runs at the start of each enqueue (1 for the first),
	// outside the broker's lock.
	onEnqueue func(call int)
}

// brokerTask is a task as the broker keeps it.
type brokerTask struct {
	task      *asynq.Task
	id        string
	state     asynq.TaskState
	retention time.Duration
	maxRetry  int
}

var errLateEnqueue = errors.New("read tcp 127.0.0.1:6379: i/o timeout")

func newFakeBroker() *fakeBroker { return &fakeBroker{tasks: map[string]*brokerTask{}} }

func (b *fakeBroker) EnqueueContext(_ context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	b.mu.Lock()
	b.calls++
	call, hook := b.calls, b.onEnqueue
	b.mu.Unlock()
	if hook != nil {
		hook(call)
	}
	bt := &brokerTask{task: task, state: asynq.TaskStatePending, maxRetry: 25}
	for _, o := range opts {
		switch o.Type() {
		case asynq.TaskIDOpt:
			bt.id = o.Value().(string)
		case asynq.RetentionOpt:
			bt.retention = o.Value().(time.Duration)
		case asynq.MaxRetryOpt:
			bt.maxRetry = o.Value().(int)
		case asynq.ProcessInOpt:
			if o.Value().(time.Duration) > 0 {
				bt.state = asynq.TaskStateScheduled
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failEnqueues > 0 {
		b.failEnqueues--
		b.held = append(b.held, bt)
		return nil, errLateEnqueue
	}
	if !b.store(bt) {
		return nil, asynq.ErrTaskIDConflict
	}
	if b.lostReplies > 0 {
		b.lostReplies--
		return nil, errLostReply
	}
	return &asynq.TaskInfo{ID: bt.id, Type: task.Type()}, nil
}

// store keeps bt unless its ID is taken; b.mu is held.
func (b *fakeBroker) store(bt *brokerTask) bool {
	if _, taken := b.tasks[bt.id]; taken {
		return false
	}
	b.tasks[bt.id] = bt
	b.order = append(b.order, bt.id)
	return true
}

// land runs the held enqueues now, late, as the broker would.
func (b *fakeBroker) land() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bt := range b.held {
		if !b.store(bt) {
			b.refused++
		}
	}
	b.held = nil
}

func (b *fakeBroker) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failLookups > 0 {
		b.failLookups--
		return nil, errLateEnqueue
	}
	bt, ok := b.tasks[id]
	if !ok {
		return nil, fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	}
	return &asynq.TaskInfo{ID: id, Queue: queue, Type: bt.task.Type(), Payload: bt.task.Payload(), Headers: bt.task.Headers(),
		State: bt.state, MaxRetry: bt.maxRetry, Retention: bt.retention}, nil
}

func (b *fakeBroker) DeleteTask(_, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt, ok := b.tasks[id]
	switch {
	case !ok:
		return fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	case bt.state == asynq.TaskStateActive:
		return errors.New("asynq: cannot delete task in active state")
	}
	delete(b.tasks, id)
	return nil
}

// setState puts the stored task id in state st.
func (b *fakeBroker) setState(id string, st asynq.TaskState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt, ok := b.tasks[id]; ok {
		bt.state = st
	}
}

// stored returns the IDs of the tasks the broker holds, in the order they
// were stored.
func (b *fakeBroker) stored() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(b.order), func(id string) bool { return b.tasks[id] == nil })
}

// runAll runs every stored task that asynq would still run (pending or
// scheduled) through h, as a server would, one after the other, on its last
// retry: it ends completed (kept by its retention) or archived.
func (b *fakeBroker) runAll(t *testing.T, h asynq.Handler) {
	t.Helper()
	for _, id := range b.stored() {
		b.mu.Lock()
		bt := b.tasks[id]
		due := bt.state == asynq.TaskStatePending || bt.state == asynq.TaskStateScheduled
		if due {
			bt.state = asynq.TaskStateActive
		}
		b.mu.Unlock()
		if !due {
			continue
		}
		withMeta(t, taskMeta{id: id, queue: "default", maxRetry: bt.maxRetry, known: true})
		err := h.ProcessTask(context.Background(), bt.task)
		switch {
		case err == nil:
			b.setState(id, asynq.TaskStateCompleted)
		case errors.Is(err, asynq.RevokeTask):
			b.mu.Lock()
			delete(b.tasks, id)
			b.mu.Unlock()
		default:
			t.Logf("stored task %s failed: %v", id, err)
			b.setState(id, asynq.TaskStateArchived)
		}
	}
}
