package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
)

// lateEnqueues is a go-redis hook on the middleware's broker client that
// makes the first n enqueues of one task ID fail without reaching the
// broker, and keeps them: land later sends them as they were, as a broker
// would run requests that reached it late. asynq enqueues with a script
// whose first key is the task's key and which has a second (the pending
// list or the scheduled set); lookups have one key and pass.
type lateEnqueues struct {
	key string // asynq:{queue}:t:<id>
	mu  sync.Mutex
	n   int
	// held are the enqueues kept, as their commands' arguments.
	held [][]any
}

func (l *lateEnqueues) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lateEnqueues) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lateEnqueues) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if l.hold(cmd) {
			err := errors.New("read tcp: i/o timeout (the request reaches the broker later)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// hold keeps cmd if it is one of the first n enqueues of the task.
func (l *lateEnqueues) hold(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" || len(args) < 5 || fmt.Sprint(args[2]) == "1" || fmt.Sprint(args[3]) != l.key {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) >= l.n {
		return false
	}
	l.held = append(l.held, slices.Clone(args))
	return true
}

func (l *lateEnqueues) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// land sends the held enqueues on c and counts those the broker refused
// (asynq's scripts answer 0 when the ID is taken).
func (l *lateEnqueues) land(ctx context.Context, c *redis.Client) (refused int, err error) {
	l.mu.Lock()
	held := slices.Clone(l.held)
	l.mu.Unlock()
	for _, args := range held {
		n, err := c.Do(ctx, args...).Int()
		if err != nil {
			return refused, err
		}
		if n == 0 {
			refused++
		}
	}
	return refused, nil
}

// TestProofLateCopyRefused (issue 20, suspicion 4), on a real broker and 3
// real lock nodes: task A, on its last retry, meets its resource busy; the
// middleware parks it as a copy A~r1, then falls back to the last-retry
// path, and each of the 4 enqueues of the copy fails (held back by a hook on
// the broker client). A then runs itself once the resource is free. The 4
// enqueues reach the broker while A's handler runs, after every check A
// made. The broker must refuse them all (A's marker holds A~r1): the task
// runs once. Before the fix the first was stored and the copy ran A again.
func TestProofLateCopyRefused(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	locks := lockClient(t, nodes, redlock.WithNodeTimeout(time.Second))
	late := &lateEnqueues{key: "asynq:{default}:t:A~r1", n: 4}
	bc := redis.NewClient(&redis.Options{Addr: broker.Addr()})
	bc.AddHook(late)
	t.Cleanup(func() { _ = bc.Close() })
	raw := broker.Client(t)
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	warmScheduleScript(t, cl, insp)

	ctx := within(t, 4*time.Minute)
	runs := &runsByTask{n: map[string]int{}}
	type landing struct {
		refused int
		err     error
	}
	landed := make(chan landing, 1)
	handler := asynq.HandlerFunc(func(hctx context.Context, task *asynq.Task) error {
		if id, _ := asynq.GetTaskID(hctx); id == "A" { // A passed its checks and runs
			r, err := late.land(ctx, raw)
			landed <- landing{r, err}
		}
		return runs.ProcessTask(hctx, task)
	})
	h := middleware.Lock(locks, middleware.ByType(), middleware.WithPolicy(middleware.Requeue()), middleware.WithBroker(bc))(handler)
	startServer(t, broker, serverConfig(4), h)

	held, err := locks.Acquire(ctx, "task:job:job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.TaskID("A"), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	failed := waitUntil(time.Minute, func() bool { return late.count() == 4 })
	_ = held.Release(ctx)
	l := landing{refused: -1, err: errors.New("A did not run")}
	select {
	case l = <-landed:
	case <-time.After(time.Minute):
	}
	// A copy stored late would be pending or scheduled (by a backstop of
	// at most a minute): the queue drains once it ran.
	waitQueueEmpty(t, insp, 2*time.Minute)
	marker := markerHolds(insp, "A~r1")
	n := runs.get("A")
	report.Add(Row{
		Scenario: "middleware with broker: a busy task on its last retry whose resubmission fails, 3 nodes",
		Fault:    "the 4 failed enqueues of its copy (parking, then the last-retry path) reach the broker while the task's own run executes its handler, after every check it made",
		Ops:      1, Lost: max(1-n, 0), Duplicated: max(n-1, 0),
		Notes: fmt.Sprintf("A ran %d time(s); %d of %d late enqueues refused by the broker (err %v); a marker holds A~r1: %v; before the fix the first was stored and its copy ran A a second time",
			n, l.refused, late.count(), l.err, marker),
	})
	if !failed || l.err != nil || n != 1 || l.refused != 4 || !marker {
		t.Fatalf("enqueues held %d (want 4), A ran %d time(s) (want 1), late enqueues refused %d of 4 (err %v), marker holds A~r1: %v",
			late.count(), n, l.refused, l.err, marker)
	}
}

// warmScheduleScript loads asynq's scheduling script into the broker (a
// held enqueue is sent again as the EVALSHA it was), by scheduling a task
// and deleting it.
func warmScheduleScript(t *testing.T, cl *asynq.Client, insp *asynq.Inspector) {
	t.Helper()
	info, err := cl.Enqueue(asynq.NewTask("warm", nil), asynq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask("default", info.ID); err != nil {
		t.Fatal(err)
	}
}

// markerHolds reports whether the task under id is a middleware marker.
func markerHolds(insp *asynq.Inspector, id string) bool {
	ti, err := insp.GetTaskInfo("default", id)
	if err != nil {
		return false
	}
	_, ok := ti.Headers["asynqlock-claimed-by"]
	return ok
}
