package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// A busy task on its last retry, with MaxRetry(0), or with a Timeout shorter
// than its wait keeps asynq's semantics under the lock (issue 45, point 3):
// each enqueue asynq accepts runs once, under its own ID, with its Unique
// lock and retention, the retry count a handler sees is asynq's, its result
// is found under its ID, and nothing is archived for a conflict. Each case
// runs two sides at once on one broker, a queue each: plain asynq (the
// control) and the middleware with WithBroker, while another holder keeps
// the task's resource for a few seconds. Before this, such a task was
// resubmitted as "<id>~r1", which freed its ID and Unique lock (an enqueue
// under the ID then took the copy for its own and never ran), ran with
// retry count 0, and stored its result under the copy's ID.

// lastRetrySide is one side: its queue and what its handler saw.
type lastRetrySide struct {
	name  string
	queue string
	mu    sync.Mutex
	runs  map[int]int // runs by seq
	seen  []string    // "seq retried/maxRetry" per run
}

func (s *lastRetrySide) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p struct{ Seq int }
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return err
	}
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	s.mu.Lock()
	s.runs[p.Seq]++
	s.seen = append(s.seen, fmt.Sprintf("%d %d/%d", p.Seq, retried, maxRetry))
	s.mu.Unlock()
	_, err := t.ResultWriter().Write(fmt.Appendf(nil, "ran seq %d", p.Seq))
	return err
}

func (s *lastRetrySide) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.runs {
		n += c
	}
	return n
}

// lastRetryRig is both sides, their broker and the lock nodes.
type lastRetryRig struct {
	broker *redistest.Node
	locks  *redlock.Client
	insp   *asynq.Inspector
	cl     *asynq.Client
	sides  []*lastRetrySide
}

const lastRetryType = "report"

func startLastRetryRig(t *testing.T) *lastRetryRig {
	t.Helper()
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	r := &lastRetryRig{broker: broker, locks: lockClient(t, nodes), insp: inspector(t, broker), cl: asynqClient(t, broker)}
	for _, name := range []string{"plain", "lock"} {
		s := &lastRetrySide{name: name, queue: "lr-" + name, runs: map[int]int{}}
		var h asynq.Handler = s
		if name == "lock" {
			h = middleware.Lock(lockClient(t, nodes), middleware.ByType(), middleware.WithBroker(brokerClient(t, broker)))(s)
		}
		cfg := serverConfig(4)
		cfg.Queues = map[string]int{s.queue: 1}
		startServer(t, broker, cfg, h)
		r.sides = append(r.sides, s)
	}
	return r
}

// hold keeps the task type's resource for d (as another worker's task
// would), from now on.
func (r *lastRetryRig) hold(t *testing.T, d time.Duration) {
	t.Helper()
	l, err := r.locks.TryAcquire(context.Background(), "task:"+lastRetryType+":"+lastRetryType, d+10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(d, func() { _ = l.Release(context.Background()) })
}

// enqueue enqueues seq on s's queue with opts; it reports whether asynq
// accepted it (false: refused for its ID or Unique lock, as asynq refuses).
func (r *lastRetryRig) enqueue(t *testing.T, s *lastRetrySide, seq int, opts ...asynq.Option) bool {
	t.Helper()
	task := asynq.NewTask(lastRetryType, fmt.Appendf(nil, `{"Seq":%d}`, seq))
	_, err := r.cl.Enqueue(task, append([]asynq.Option{asynq.Queue(s.queue)}, opts...)...)
	switch {
	case err == nil:
		return true
	case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		return false
	}
	t.Fatal(err)
	return false
}

// live counts s's tasks the broker keeps that may still run.
func (r *lastRetryRig) live(t *testing.T, s *lastRetrySide) int {
	t.Helper()
	qi, err := r.insp.GetQueueInfo(s.queue)
	if err != nil {
		return 0
	}
	return qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived
}

// settle waits (bounded) until s's queue has nothing left that may run, and
// fails if any task is archived.
func (r *lastRetryRig) settle(t *testing.T, s *lastRetrySide, limit time.Duration) {
	t.Helper()
	var qi *asynq.QueueInfo
	if !waitUntil(limit, func() bool {
		var err error
		qi, err = r.insp.GetQueueInfo(s.queue)
		return err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry+qi.Archived == 0
	}) {
		t.Fatalf("%s: queue not drained within %v: pending %d, active %d, scheduled %d, retry %d, archived %d (%s)",
			s.name, limit, qi.Pending, qi.Active, qi.Scheduled, qi.Retry, qi.Archived, r.archivedErrs(s))
	}
}

func (r *lastRetryRig) archivedErrs(s *lastRetrySide) string {
	tasks, _ := r.insp.ListArchivedTasks(s.queue)
	out := ""
	for _, ti := range tasks {
		out += ti.ID + ": " + ti.LastErr + "; "
	}
	return out
}

// TestLastRetryTaskIDReusedWhileBusy: TaskID("report-R") + MaxRetry(0),
// enqueued every 500ms while the resource is held 8s (past the Wait
// policy's wait: the task is parked): every enqueue asynq
// accepts runs exactly once (the ID stays taken while the task waits, so
// asynq refuses enqueues under it then, as it does while a plain task
// runs), and nothing is left archived. Before: the ~r1 copy freed the ID,
// and an accepted enqueue took the copy for its own earlier one: never ran.
func TestLastRetryTaskIDReusedWhileBusy(t *testing.T) {
	t.Parallel()
	r := startLastRetryRig(t)
	r.hold(t, 8*time.Second)
	accepted := map[string][]int{}
	for seq := 1; seq <= 16; seq++ {
		for _, s := range r.sides {
			if r.enqueue(t, s, seq, asynq.TaskID("report-R"), asynq.MaxRetry(0)) {
				accepted[s.name] = append(accepted[s.name], seq)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, s := range r.sides {
		r.settle(t, s, time.Minute)
		s.mu.Lock()
		t.Logf("%s: accepted %v, runs %v", s.name, accepted[s.name], s.runs)
		if len(s.runs) != len(accepted[s.name]) {
			t.Errorf("%s: %d seqs ran, %d accepted", s.name, len(s.runs), len(accepted[s.name]))
		}
		for _, seq := range accepted[s.name] {
			if s.runs[seq] != 1 {
				t.Errorf("%s: seq %d accepted, ran %d times; want once", s.name, seq, s.runs[seq])
			}
		}
		s.mu.Unlock()
	}
}

// TestLastRetryUniqueWhileBusy: Unique(1m) + MaxRetry(0), the same task
// enqueued every 500ms while the resource is held 8s (past the Wait
// policy's wait: the task is parked): never more than one
// live at once (asynq's Unique lock holds while it waits), each accepted
// enqueue runs once. Before: 4 identical tasks live at once.
func TestLastRetryUniqueWhileBusy(t *testing.T) {
	t.Parallel()
	r := startLastRetryRig(t)
	r.hold(t, 8*time.Second)
	accepted := map[string]int{}
	most := map[string]int{}
	for range 16 {
		for _, s := range r.sides {
			if r.enqueue(t, s, 1, asynq.Unique(time.Minute), asynq.MaxRetry(0)) {
				accepted[s.name]++
			}
			most[s.name] = max(most[s.name], r.live(t, s))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, s := range r.sides {
		r.settle(t, s, time.Minute)
		t.Logf("%s: accepted %d, ran %d, most live at once %d", s.name, accepted[s.name], s.total(), most[s.name])
		if most[s.name] > 1 || s.total() != accepted[s.name] {
			t.Errorf("%s: most live at once %d, ran %d of %d accepted; want at most 1, each once", s.name, most[s.name], s.total(), accepted[s.name])
		}
	}
}

// TestLastRetryKeepsRetentionResultAndRetryCount: one task with TaskID,
// Retention(1m) and MaxRetry(0) meets the resource busy for 8s: it runs once, the
// handler sees retry count 0 of 0 as plain asynq's does, and afterwards the
// task is completed under its own ID with its result, kept by its
// retention. Before: it ran as ret~r1, and "ret" read "not found".
func TestLastRetryKeepsRetentionResultAndRetryCount(t *testing.T) {
	t.Parallel()
	r := startLastRetryRig(t)
	r.hold(t, 8*time.Second)
	for _, s := range r.sides {
		if !r.enqueue(t, s, 7, asynq.TaskID("ret"), asynq.Retention(time.Minute), asynq.MaxRetry(0)) {
			t.Fatal("refused")
		}
	}
	for _, s := range r.sides {
		if !waitUntil(time.Minute, func() bool { return s.total() >= 1 }) {
			t.Fatalf("%s: not run within a minute (%s)", s.name, r.archivedErrs(s))
		}
		var ti *asynq.TaskInfo
		waitUntil(10*time.Second, func() bool {
			ti, _ = r.insp.GetTaskInfo(s.queue, "ret")
			return ti != nil && ti.State == asynq.TaskStateCompleted
		})
		time.Sleep(500 * time.Millisecond) // a second run would show by now
		s.mu.Lock()
		seen := append([]string(nil), s.seen...)
		s.mu.Unlock()
		t.Logf("%s: runs %v, task %+v", s.name, seen, ti)
		if len(seen) != 1 || seen[0] != "7 0/0" {
			t.Errorf("%s: handler saw %v; want one run with retry count 0 of 0", s.name, seen)
		}
		if ti == nil || ti.State != asynq.TaskStateCompleted || string(ti.Result) != "ran seq 7" || ti.Retention != time.Minute {
			t.Errorf("%s: task ret is %+v; want completed, result \"ran seq 7\", retention 1m", s.name, ti)
		}
	}
}

// TestLastRetryTimeoutShorterThanTheWait: Timeout(2s) behind a 5s holder,
// with MaxRetry(0) and with MaxRetry(25): each runs once the holder is
// gone, never archived, and the handler sees retry count 0 (a conflict
// consumes no retry). Before the fix: MaxRetry(0) was archived at its timeout
// with "context deadline exceeded", never run; MaxRetry(25) used 3 retries.
// A wait ends a fifth of the timeout before it, leaving the park's round
// trips 400ms: 1s left 200ms, which a machine under heavy load overran.
func TestLastRetryTimeoutShorterThanTheWait(t *testing.T) {
	t.Parallel()
	r := startLastRetryRig(t)
	r.hold(t, 5*time.Second)
	for _, s := range r.sides {
		if !r.enqueue(t, s, 1, asynq.Timeout(2*time.Second), asynq.MaxRetry(0)) || !r.enqueue(t, s, 2, asynq.Timeout(2*time.Second), asynq.MaxRetry(25)) {
			t.Fatal("refused")
		}
	}
	for _, s := range r.sides {
		r.settle(t, s, time.Minute)
		s.mu.Lock()
		seen := append([]string(nil), s.seen...)
		s.mu.Unlock()
		t.Logf("%s: runs %v", s.name, seen)
		want := map[string]bool{"1 0/0": true, "2 0/25": true}
		if len(seen) != 2 || !want[seen[0]] || !want[seen[1]] || seen[0] == seen[1] {
			t.Errorf("%s: handler saw %v; want seq 1 at retry 0/0 and seq 2 at 0/25, once each", s.name, seen)
		}
	}
}
