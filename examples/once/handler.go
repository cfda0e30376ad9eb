package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// update is a task's payload: one more unit of a SKU.
type update struct {
	SKU string `json:"sku"`
}

// stock is the handler: a read-modify-write of the SKU's stock, +1, not
// idempotent on purpose, so that a task run twice shows in the stock. It
// counts the runs of each task (by its stable key) and the handlers
// running now.
type stock struct {
	store    *redis.Client
	work     time.Duration
	inflight atomic.Int32

	mu   sync.Mutex
	runs map[string]int
}

func (h *stock) ProcessTask(ctx context.Context, t *asynq.Task) error {
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	var u update
	if err := json.Unmarshal(t.Payload(), &u); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	v, err := h.store.Get(ctx, "stock:"+u.SKU).Int64()
	if err != nil {
		return err
	}
	time.Sleep(h.work)
	if err := h.store.Set(ctx, "stock:"+u.SKU, v+1, 0).Err(); err != nil {
		return err
	}
	key, _ := middleware.TaskKeyFromContext(ctx) // the task's ID, the same at every delivery
	h.mu.Lock()
	h.runs[key]++
	h.mu.Unlock()
	return nil
}

// applied tells whether the task of this ID ran (a busy task keeps its ID
// while it waits, on a last retry too).
func (h *stock) applied(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[id] > 0
}

// tally returns how many tasks ran, and the runs beyond the first.
func (h *stock) tally() (ran, again int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.runs {
		ran++
		again += n - 1
	}
	return ran, again
}
