package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// fakeQueue mimics asynq's enqueue by task ID: an ID is refused while its
// task exists (pending, or completed within its retention). Tasks complete
// at once.
type fakeQueue struct {
	mu        sync.Mutex
	until     map[string]time.Time // task ID → end of retention
	enqueued  map[string]int
	conflicts int
	retention time.Duration
}

func (q *fakeQueue) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	var id string
	var retention time.Duration
	for _, o := range opts {
		switch o.Type() {
		case asynq.TaskIDOpt:
			id = o.Value().(string)
		case asynq.RetentionOpt:
			retention = o.Value().(time.Duration)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.until == nil {
		q.until, q.enqueued = map[string]time.Time{}, map[string]int{}
	}
	if id == "" {
		return nil, errors.New("fakeQueue: no task ID")
	}
	if time.Now().Before(q.until[id]) {
		q.conflicts++
		return nil, fmt.Errorf("%w", asynq.ErrTaskIDConflict)
	}
	q.until[id] = time.Now().Add(retention)
	q.enqueued[id]++
	q.retention = retention
	return &asynq.TaskInfo{ID: id}, nil
}

// Three Scheduler replicas enqueue each tick once; a fourth replica, 300ms
// late and with no lock in common with them, is stopped by the task ID.
func TestBridgeEnqueuesEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		q := &fakeQueue{}
		rec := &recorder{}
		task := asynq.NewTask("report:daily", []byte(`{}`))
		var scheds []*Scheduler
		for range 3 {
			s, err := newScheduler(locks.client(), []Option{quiet, WithSkew(400 * time.Millisecond), WithObserver(rec.observe)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RegisterTask("report", "* * * * * *", q, task); err != nil {
				t.Fatal(err)
			}
			s.Start()
			scheds = append(scheds, s)
		}
		// The late replica uses its own lock service: only asynq stands
		// between it and a second enqueue. (It also sees tick 0, which the
		// others, started at 0, do not.)
		lateRec := &recorder{}
		late := startReplica(t, newMemLocks().client(), "report", Every(time.Second), EnqueueJob(q, task), 300*time.Millisecond,
			WithSkew(400*time.Millisecond), WithObserver(lateRec.observe))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		for _, s := range scheds {
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		stopCrons(late)

		for _, tick := range ticks(t0, 10) {
			id := taskID("report", tick)
			if n := q.enqueued[id]; n != 1 {
				t.Errorf("task %s enqueued %d times, want 1", id, n)
			}
		}
		for id, n := range q.enqueued {
			if n != 1 {
				t.Errorf("task %s enqueued %d times", id, n)
			}
		}
		if n := rec.count(OutcomeRan); n != 10 {
			t.Errorf("%d enqueued events from the 3 replicas, want 10", n)
		}
		if n := lateRec.count(OutcomeSkippedOtherReplica); n != 10 {
			t.Errorf("late replica: %d events of a task already enqueued, want 10 (events %+v)", n, lateRec.events)
		}
		// The window is 400ms+400ms; asynq keeps whole seconds, at least a minute.
		if q.retention != time.Minute {
			t.Errorf("retention %v, want %v", q.retention, time.Minute)
		}
		time.Sleep(2 * time.Second)
	})
}

func TestBridgeRetentionAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		failing := enqueueFunc(func(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
			return nil, errors.New("redis down")
		})
		rec := &recorder{}
		c := startReplica(t, newMemLocks().client(), "t", Every(time.Second), EnqueueJob(failing, asynq.NewTask("x", nil)), 0,
			WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		q := &fakeQueue{}
		c2 := startReplica(t, newMemLocks().client(), "t2", Every(time.Second), EnqueueJob(q, asynq.NewTask("x", nil)), 0,
			WithSkew(20300*time.Millisecond)) // a tick window of 60.9s, past the default minute
		time.Sleep(1100 * time.Millisecond)
		stopCrons(c, c2)
		if f := rec.eventsOf(OutcomeFailed); len(f) != 1 || f[0].Err.Error() != "redis down" || f[0].TaskID == "" {
			t.Fatalf("want a failed event with the task ID, got %+v", rec.events)
		}
		if q.retention != 61*time.Second {
			t.Fatalf("retention %v, want the 60.9s tick window rounded up to 61s", q.retention)
		}
		err := EnqueueJob(q, asynq.NewTask("x", nil)).(contextJob).RunContext(context.Background())
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Fatalf("EnqueueJob outside Singleton: %v, want redlock.ErrInvalid", err)
		}
		time.Sleep(time.Second)
	})
}

// An enqueuer that panics fails its tick, reported with the panic; the
// next tick is enqueued.
func TestBridgePanicIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		panicky := enqueueFunc(func(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
			if calls++; calls == 1 {
				panic("client bug")
			}
			return &asynq.TaskInfo{}, nil
		})
		rec := &recorder{}
		c := startReplica(t, newMemLocks().client(), "p", Every(time.Second), EnqueueJob(panicky, asynq.NewTask("x", nil)), 0,
			WithSkew(300*time.Millisecond), WithObserver(rec.observe))
		time.Sleep(2*time.Second + 100*time.Millisecond)
		stopCrons(c)
		var pe *panicError
		if f := rec.eventsOf(OutcomeFailed); len(f) != 1 || !errors.As(f[0].Err, &pe) || pe.value != "client bug" {
			t.Fatalf("want one failed event with the panic, got %+v", rec.events)
		}
		if rec.count(OutcomeRan) != 1 {
			t.Fatalf("want the next tick enqueued, got %+v", rec.events)
		}
		time.Sleep(time.Second)
	})
}

type enqueueFunc func(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error)

func (f enqueueFunc) EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	return f(ctx, t, opts...)
}

var _ cron.Job = EnqueueJob(nil, nil)
