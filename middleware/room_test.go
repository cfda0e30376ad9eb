package middleware

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestDefaultRoomKeepsWorkersForColdKeys: a middleware given no Room, two
// workers (asynq's Concurrency 2 lets two tasks in at once), a hot key held
// by another client and a long Wait: the second hot task finds the default
// wait places taken by the first (two workers leave one waiting) and is
// requeued, so the cold tasks queued behind it run while the hot key is
// still held. The control, without the default cap (as the middleware was),
// has both workers waiting for the hot key and nobody running cold tasks.
func TestDefaultRoomKeepsWorkersForColdKeys(t *testing.T) {
	for _, v := range []struct {
		name    string
		opts    []Option
		control bool
	}{{"default", nil, false}, {"control-no-cap", []Option{withMaxWaiters(2)}, true}} {
		t.Run(v.name, func(t *testing.T) {
			e, held := busyEnv(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
			var cold atomic.Int32
			rec := &recorder{fn: func(ctx context.Context) error {
				if li, _ := LockFromContext(ctx); li.Resource != res {
					cold.Add(1)
				}
				return nil
			}}
			m, h := lockMW(t, e.locks, ByField("sku"), rec, append(v.opts, WithPolicy(Wait(time.Minute)))...)
			tasks := make(chan *asynq.Task, 5)
			tasks <- adjust()
			tasks <- adjust()
			for _, sku := range []string{"C-1", "C-2", "C-3"} {
				tasks <- task("stock:adjust", `{"sku":"`+sku+`","delta":1}`)
			}
			close(tasks)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var requeued atomic.Int32
			for range 2 { // the workers
				wg.Go(func() {
					for tk := range tasks {
						if err := h.ProcessTask(ctx, tk); errors.Is(err, ErrConflict) {
							requeued.Add(1)
						}
					}
				})
			}
			defer func() { cancel(); wg.Wait() }()
			if v.control {
				waitFor(t, "both workers waiting for the hot key", func() bool { return m.waiting(res) == 2 })
				if n := cold.Load(); n != 0 {
					t.Fatalf("control: %d cold tasks ran with both workers waiting", n)
				}
				return
			}
			waitFor(t, "the cold tasks run while the hot key is held", func() bool { return cold.Load() == 3 })
			if m.waiting(res) != 1 || requeued.Load() != 1 {
				t.Fatalf("%d waiting for the hot key, %d requeued; want 1 and 1", m.waiting(res), requeued.Load())
			}
			if err := held.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
