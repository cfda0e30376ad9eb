package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestProofMiddlewareClientClosedAfterAcquire (issue 20, finding 3), on 3
// real nodes: the lock client closes right after the middleware's acquire,
// before its keep-alive starts (a worker's shutdown race). The handler
// must be told, with a cause matching redlock.ErrLockLost, before Until,
// and the task must not complete as a success.
func TestProofMiddlewareClientClosedAfterAcquire(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var cl *redlock.Client
	var once sync.Once
	closeOnAcquire := func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err == nil {
			once.Do(func() { _ = cl.Close() })
		}
	}
	cl = lockClient(t, c, redlock.WithNodeTimeout(150*time.Millisecond), redlock.WithObserver(closeOnAcquire))
	told, late := 0, 0
	var cause error
	h := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		li, _ := middleware.LockFromContext(ctx)
		select {
		case <-ctx.Done():
			told, cause = 1, context.Cause(ctx)
			if !time.Now().Before(li.Until) {
				late = 1
			}
		case <-time.After(time.Until(li.Until) + 2*time.Second): // well past the validity
		}
		return nil
	})
	task := asynq.NewTask("stock:adjust", []byte(`{"sku":"SKU-1","delta":1}`))
	err := middleware.Lock(cl, middleware.ByField("sku"), middleware.WithTTL(time.Second))(h).ProcessTask(context.Background(), task)
	bad := 0
	if err == nil || !errors.Is(err, redlock.ErrLockLost) {
		bad = 1
	}
	report.Add(Row{
		Scenario: "middleware: 1 task, ttl 1s, 3 nodes",
		Fault:    "lock client closed between the acquire and the keep-alive's start",
		Ops:      1, Violations: bad + late + 1 - told,
		Notes: fmt.Sprintf("handler told: %v (cause %v); task returned: %v", told == 1, cause, err),
	})
	if told == 0 || late == 1 || !errors.Is(cause, redlock.ErrLockLost) {
		t.Errorf("handler told %v, after Until %v, cause %v: want told before Until with ErrLockLost", told == 1, late == 1, cause)
	}
	if bad == 1 {
		t.Errorf("task returned %v, want an error matching ErrLockLost (never a success)", err)
	}
}
