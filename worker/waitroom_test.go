package worker

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// roomBed is a worker whose handler blocks each run of a SKU until the SKU
// is let go, counting the runs in progress.
type roomBed struct {
	w       *Worker
	insp    *asynq.Inspector
	mu      sync.Mutex
	running int
	most    int
	started map[string]int
	release map[string]chan struct{}
}

func newRoomBed(t *testing.T, concurrency, room int, skus ...string) *roomBed {
	f := newFixture(t)
	f.cfg.Concurrency, f.cfg.WaitRoom = concurrency, room
	f.cfg.ConflictWait = time.Minute // waiting tasks keep waiting while the test looks
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	b := &roomBed{w: w, started: map[string]int{}, release: map[string]chan struct{}{}}
	for _, s := range skus {
		b.release[s] = make(chan struct{})
	}
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		var p struct{ SKU string }
		_ = json.Unmarshal(t.Payload(), &p)
		b.mu.Lock()
		b.running++
		b.most = max(b.most, b.running)
		b.started[p.SKU]++
		b.mu.Unlock()
		<-b.release[p.SKU]
		b.mu.Lock()
		b.running--
		b.mu.Unlock()
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	b.insp = asynq.NewInspector(asynq.RedisClientOpt{Addr: f.broker.Addr()})
	t.Cleanup(func() { _ = b.insp.Close() })
	start(t, w)
	return b
}

func (b *roomBed) enqueue(t *testing.T, sku string) {
	t.Helper()
	p, _ := json.Marshal(map[string]any{"sku": sku})
	if _, err := b.w.Client().Enqueue(asynq.NewTask("stock:adjust", p)); err != nil {
		t.Fatal(err)
	}
}

func (b *roomBed) startedRuns(sku string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started[sku]
}

// until polls cond for up to 30s (a test not about timing).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *roomBed) active(t *testing.T) int {
	qi, err := b.insp.GetQueueInfo("default")
	if err != nil {
		return -1
	}
	return qi.Active
}

// TestWaitRoomKeepsWorkersForRunnableTasks: with WORKER_CONCURRENCY=2, a
// task waiting for a held resource does not take the second running place:
// a task of another resource runs beside the holder, and never more than 2
// handlers run at once. The control, without a waiting room, shows the
// waiting task taking the worker the other resource's task needed.
func TestWaitRoomKeepsWorkersForRunnableTasks(t *testing.T) {
	t.Run("room", func(t *testing.T) {
		b := newRoomBed(t, 2, -1, "X", "Y", "Z")
		b.enqueue(t, "X")
		until(t, "X running", func() bool { return b.startedRuns("X") == 1 })
		b.enqueue(t, "X")
		until(t, "the second X task taken by the worker", func() bool { return b.active(t) == 2 })
		b.enqueue(t, "Y")
		until(t, "Y running beside X while X's second task waits", func() bool { return b.startedRuns("Y") == 1 })
		b.enqueue(t, "Z") // both places are taken: Z waits for one
		until(t, "Z taken by the worker", func() bool { return b.active(t) == 4 })
		close(b.release["Y"])
		until(t, "Z running in Y's place", func() bool { return b.startedRuns("Z") == 1 })
		close(b.release["Z"])
		close(b.release["X"])
		until(t, "both X tasks run", func() bool { return b.startedRuns("X") == 2 })
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.most != 2 {
			t.Fatalf("%d handlers ran at once with WORKER_CONCURRENCY=2", b.most)
		}
	})
	t.Run("control without a room", func(t *testing.T) {
		b := newRoomBed(t, 2, 0, "X", "Y")
		b.enqueue(t, "X")
		until(t, "X running", func() bool { return b.startedRuns("X") == 1 })
		b.enqueue(t, "X")
		until(t, "the second X task taken by the worker", func() bool { return b.active(t) == 2 })
		b.enqueue(t, "Y")
		// Both of asynq's workers are taken (the holder and the waiter):
		// Y cannot start however long it is given.
		time.Sleep(300 * time.Millisecond)
		if n := b.startedRuns("Y"); n != 0 {
			t.Fatalf("Y ran %d times while both workers were taken", n)
		}
		close(b.release["X"])
		close(b.release["Y"])
		until(t, "Y running once X is done", func() bool { return b.startedRuns("Y") == 1 })
	})
}
