package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// A completion record names one run of one enqueue (issue 45): what asynq
// users do with a fixed task ID keeps asynq's counts under the lock. Each
// case runs two sides at once on one broker, a queue each: plain asynq (the
// control: the counts a user expects) and the middleware with completion
// records on (the default window, an hour). Before records named a run,
// the middleware side ran a reused ID once in its window.

// reuseSide is one side of a reuse test: its queue and its handler's runs.
type reuseSide struct {
	name  string
	queue string
	mu    sync.Mutex
	runs  int
}

func (s *reuseSide) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// startReuseSides starts both sides' servers (janitor every 100ms, so that
// a completed task's retention ends on time) and returns them.
func startReuseSides(t *testing.T, broker *redistest.Node, nodes *redistest.Cluster) []*reuseSide {
	t.Helper()
	var sides []*reuseSide
	for _, name := range []string{"plain", "records"} {
		s := &reuseSide{name: name, queue: "reuse-" + name}
		var h asynq.Handler = asynq.HandlerFunc(func(_ context.Context, _ *asynq.Task) error {
			s.mu.Lock()
			s.runs++
			s.mu.Unlock()
			return nil
		})
		if name == "records" {
			h = middleware.Lock(lockClient(t, nodes, redlock.WithNodeTimeout(time.Second)), middleware.ByType(),
				middleware.WithBroker(brokerClient(t, broker)))(h)
		}
		cfg := serverConfig(2)
		cfg.Queues = map[string]int{s.queue: 1}
		cfg.JanitorInterval = 100 * time.Millisecond
		startServer(t, broker, cfg, h)
		sides = append(sides, s)
	}
	return sides
}

// waitRuns waits (bounded) until side s ran n times.
func waitRuns(t *testing.T, s *reuseSide, n int, limit time.Duration, what string) {
	t.Helper()
	if !waitUntil(limit, func() bool { return s.count() >= n }) {
		t.Fatalf("%s: %s: %d runs after %v, want %d", s.name, what, s.count(), limit, n)
	}
}

// TestOnceReusedTaskIDRuns: a fixed TaskID enqueued again after each run
// finished (the task gone) runs every time, as with plain asynq.
func TestOnceReusedTaskIDRuns(t *testing.T) {
	t.Parallel()
	const enqueues = 8
	nodes, broker := redistest.StartCluster(t, 3), redistest.StartNode(t)
	sides := startReuseSides(t, broker, nodes)
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	for _, s := range sides {
		for n := 1; n <= enqueues; n++ {
			if _, err := cl.Enqueue(asynq.NewTask("report", []byte(`{"report":"R"}`)), asynq.TaskID("report-R"), asynq.Queue(s.queue)); err != nil {
				t.Fatalf("%s: enqueue %d: %v", s.name, n, err)
			}
			// The task is gone once its run finished: the next enqueue is a new task.
			if !waitUntil(30*time.Second, func() bool { return s.count() >= n && goneFrom(insp, s.queue, "report-R") }) {
				t.Fatalf("%s: enqueue %d of a reused TaskID: %d runs after 30s, want %d", s.name, n, s.count(), n)
			}
		}
	}
	for _, s := range sides {
		t.Logf("%s: %d runs of %d enqueues of one TaskID", s.name, s.count(), enqueues)
		if s.count() != enqueues {
			t.Fatalf("%s: %d runs, want %d", s.name, s.count(), enqueues)
		}
	}
}

// TestOnceTaskIDWithRetentionRunsEachPeriod: asynq's documented
// de-duplication of a periodic task (a fixed TaskID with Retention: an
// enqueue conflicts while the completed task is kept, and the first one
// after its retention is the next period's task) runs once a period.
func TestOnceTaskIDWithRetentionRunsEachPeriod(t *testing.T) {
	t.Parallel()
	const periods = 3
	nodes, broker := redistest.StartCluster(t, 3), redistest.StartNode(t)
	sides := startReuseSides(t, broker, nodes)
	cl := asynqClient(t, broker)
	for _, s := range sides {
		for p := 1; p <= periods; p++ {
			conflicts := 0
			stored := waitUntil(30*time.Second, func() bool {
				_, err := cl.Enqueue(asynq.NewTask("report", []byte(`{"report":"R"}`)), asynq.TaskID("report-R"),
					asynq.Queue(s.queue), asynq.Retention(time.Second))
				if errors.Is(err, asynq.ErrTaskIDConflict) {
					conflicts++
					return false
				}
				if err != nil {
					t.Fatalf("%s: period %d: %v", s.name, p, err)
				}
				return true
			})
			if !stored {
				t.Fatalf("%s: period %d: the TaskID stayed taken for 30s", s.name, p)
			}
			if p > 1 && conflicts == 0 {
				t.Fatalf("%s: period %d: no enqueue conflicted with the retained task: the test does not de-duplicate", s.name, p)
			}
			waitRuns(t, s, p, 30*time.Second, "period's task")
		}
	}
	time.Sleep(500 * time.Millisecond) // a late extra run would show here
	for _, s := range sides {
		t.Logf("%s: %d runs in %d periods", s.name, s.count(), periods)
		if s.count() != periods {
			t.Fatalf("%s: %d runs in %d periods, want one a period", s.name, s.count(), periods)
		}
	}
}

// TestOnceOperatorRerunRuns: an operator's Inspector.RunTask of a retained
// completed task runs it again, as with plain asynq, and the broker keeps it
// as completed again.
func TestOnceOperatorRerunRuns(t *testing.T) {
	t.Parallel()
	nodes, broker := redistest.StartCluster(t, 3), redistest.StartNode(t)
	sides := startReuseSides(t, broker, nodes)
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	for _, s := range sides {
		if _, err := cl.Enqueue(asynq.NewTask("report", []byte(`{"report":"R"}`)), asynq.TaskID("report-R"),
			asynq.Queue(s.queue), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
		completed := func() bool {
			ti, err := insp.GetTaskInfo(s.queue, "report-R")
			return err == nil && ti.State == asynq.TaskStateCompleted
		}
		if !waitUntil(30*time.Second, func() bool { return s.count() == 1 && completed() }) {
			t.Fatalf("%s: first run: %d runs", s.name, s.count())
		}
		if err := insp.RunTask(s.queue, "report-R"); err != nil {
			t.Fatalf("%s: RunTask: %v", s.name, err)
		}
		waitRuns(t, s, 2, 30*time.Second, "operator's re-run")
		if !waitUntil(30*time.Second, completed) {
			t.Fatalf("%s: the re-run not kept as completed", s.name)
		}
	}
	for _, s := range sides {
		t.Logf("%s: %d runs (one, then the operator's re-run)", s.name, s.count())
		if s.count() != 2 {
			t.Fatalf("%s: %d runs, want 2", s.name, s.count())
		}
	}
}

// goneFrom reports whether the broker no longer holds task id in queue.
func goneFrom(insp *asynq.Inspector, queue, id string) bool {
	_, err := insp.GetTaskInfo(queue, id)
	return err != nil && strings.Contains(err.Error(), asynq.ErrTaskNotFound.Error())
}
