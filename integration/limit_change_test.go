package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// A change of limit rolled out as a deploy does (docs/design/REDLOCK.md,
// "Changing n"): servers of the old limit run, servers of the new one start
// beside them under load, then the old ones shut down.

// rollRuns is the handler of a roll: it records each task's runs, the most
// tasks running at once over the whole roll and once the old servers are
// gone.
type rollRuns struct {
	work               time.Duration
	inside, peak, late atomic.Int32
	oldGone            atomic.Bool
	mu                 sync.Mutex
	runs               map[string]int
}

func (h *rollRuns) ProcessTask(ctx context.Context, t *asynq.Task) error {
	now := h.inside.Add(1)
	defer h.inside.Add(-1)
	raise(&h.peak, now)
	if h.oldGone.Load() {
		raise(&h.late, now)
	}
	time.Sleep(h.work)
	h.mu.Lock()
	h.runs[string(t.Payload())]++
	h.mu.Unlock()
	return nil
}

func raise(p *atomic.Int32, v int32) {
	for cur := p.Load(); v > cur && !p.CompareAndSwap(cur, v); cur = p.Load() {
	}
}

func (h *rollRuns) done() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.runs)
}

// rollSide is one set of servers of one limit.
type rollSide struct {
	servers []*asynq.Server
	fails   atomic.Int32 // tasks that returned a failure (not a conflict)
	ran     atomic.Int32 // tasks whose handler it ran to success
}

// startSide starts two servers (as two processes) whose middleware allows
// limit tasks of the type at once; refuse, the control, fails a task when
// the nodes show a slot of another limit held, as the refusal of another
// limit did before the slots were shared.
func startSide(t *testing.T, nodes *redistest.Cluster, broker *redistest.Node, h asynq.Handler, queue string, limit int, refuse bool) *rollSide {
	t.Helper()
	side := &rollSide{}
	for range 2 {
		lc := lockClient(t, nodes, redlock.WithNodeTimeout(time.Second))
		mw := middleware.Lock(lc, middleware.ByType(), middleware.WithLimit(limit), middleware.WithBroker(brokerClient(t, broker)))
		next := mw(h)
		if refuse {
			next = refusing(lc, limit, next)
		}
		counted := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			err := next.ProcessTask(ctx, task)
			if err != nil && middleware.IsFailure(err) && ctx.Err() == nil {
				side.fails.Add(1)
			}
			if err == nil {
				side.ran.Add(1)
			}
			return err
		})
		cfg := serverConfig(4)
		cfg.Queues = map[string]int{queue: 1}
		side.servers = append(side.servers, startServer(t, broker, cfg, counted))
	}
	return side
}

// errOtherLimit is the control's refusal.
var errOtherLimit = errors.New("resource used with another limit")

// refusing is the control's rule of a refusal: a task whose resource has
// a slot at or above its limit held (by a caller of a larger one) fails
// with errOtherLimit.
func refusing(lc *redlock.Client, limit int, next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		states, err := lc.Inspect(ctx, "task:"+task.Type()+":"+task.Type())
		if err != nil {
			return err
		}
		for _, s := range states {
			if s.Token != "" && s.Slot >= limit {
				return fmt.Errorf("%w: slot %d held, here limit %d", errOtherLimit, s.Slot, limit)
			}
		}
		return next.ProcessTask(ctx, task)
	})
}

// waitDone waits until h ran n tasks, at most limit.
func (h *rollRuns) waitDone(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for h.done() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks done after %v", h.done(), n, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// roll enqueues tasks of one type, runs them on servers of limit old,
// starts servers of limit nw once a third are done, shuts the old ones down
// once two thirds are and the new ones ran tasks beside them (as a rolling
// deploy's new pods serve before the old ones stop: else, from 5 to 3, the
// new side's tasks could all meet the old side's holders, park, and run
// only once the old side is gone), and waits for all (unless refuse, the
// control, which returns once the new side failed a task or all are done).
func roll(t *testing.T, nodes *redistest.Cluster, broker *redistest.Node, old, nw, tasks int, refuse bool) (*rollRuns, *rollSide, *rollSide) {
	t.Helper()
	queue := fmt.Sprintf("roll-%d-%d-%v", old, nw, refuse)
	c := asynqClient(t, broker)
	for i := range tasks {
		if _, err := c.Enqueue(asynq.NewTask("tenant:"+queue, []byte(strconv.Itoa(i))), asynq.Queue(queue), asynq.MaxRetry(25)); err != nil {
			t.Fatal(err)
		}
	}
	h := &rollRuns{work: 20 * time.Millisecond, runs: map[string]int{}}
	oldSide := startSide(t, nodes, broker, h, queue, old, refuse)
	h.waitDone(t, tasks/3, 2*time.Minute)
	newSide := startSide(t, nodes, broker, h, queue, nw, refuse)
	if refuse {
		for i := 0; newSide.fails.Load()+oldSide.fails.Load() == 0 && h.done() < tasks; i++ {
			if i == 6000 {
				t.Fatal("the control neither failed a task nor finished in 60s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		return h, oldSide, newSide
	}
	h.waitDone(t, 2*tasks/3, 2*time.Minute)
	for deadline := time.Now().Add(2 * time.Minute); newSide.ran.Load() < 3 && h.done() < tasks; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d -> %d: the new side ran %d tasks beside the old one in 2m", old, nw, newSide.ran.Load())
		}
	}
	for _, s := range oldSide.servers {
		s.Shutdown() // lets running tasks finish; waiting ones go back to the queue
	}
	h.late.Store(0)
	h.oldGone.Store(true)
	h.waitDone(t, tasks, 2*time.Minute)
	return h, oldSide, newSide
}

// TestLimitChangeRollsThroughAsynq: 3 -> 5 and 5 -> 3 on one task type,
// old and new servers side by side under load: no task fails, each runs
// once, never more than max(old, new) at once, never more than the new
// limit once the old servers are gone. The control, with the refusal of a
// resource used with another limit, fails tasks on the same roll.
func TestLimitChangeRollsThroughAsynq(t *testing.T) {
	const tasks = 120
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	for _, c := range [][2]int{{3, 5}, {5, 3}} {
		old, nw := c[0], c[1]
		h, oldSide, newSide := roll(t, nodes, broker, old, nw, tasks, false)
		for id, n := range h.runs {
			if n != 1 {
				t.Errorf("%d -> %d: task %s ran %d times", old, nw, id, n)
			}
		}
		if f := oldSide.fails.Load() + newSide.fails.Load(); f != 0 {
			t.Errorf("%d -> %d: %d tasks failed", old, nw, f)
		}
		if p := h.peak.Load(); p > int32(max(old, nw)) {
			t.Errorf("%d -> %d: %d tasks ran at once, more than %d", old, nw, p, max(old, nw))
		}
		if p := h.late.Load(); p > int32(nw) {
			t.Errorf("%d -> %d: %d tasks ran at once after the old servers were gone", old, nw, p)
		}
		t.Logf("%d -> %d: %d tasks once each, none failed, at most %d at once (%d once the old servers were gone)",
			old, nw, tasks, h.peak.Load(), h.late.Load())
	}
	h, oldSide, newSide := roll(t, nodes, broker, 3, 5, 60, true)
	f := oldSide.fails.Load() + newSide.fails.Load()
	if f == 0 {
		t.Fatalf("control: the refusal of another limit failed no task (%d done)", h.done())
	}
	t.Logf("control: with the refusal, %d tasks failed on the same roll 3 -> 5", f)
}
