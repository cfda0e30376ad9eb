package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// TestAcquireEndsAtItsDeadlineWithABlackHoledNode: a waiter whose context
// ends while one node is black-holed returns at its deadline, not a node
// timeout later (subscribing to the release channel hangs on that node).
// The node timeout is long (2s) and the clients' read timeouts longer, so a
// wait that ignores the context shows as a return seconds late; the bound
// asserted is half the node timeout past the deadline.
func TestAcquireEndsAtItsDeadlineWithABlackHoledNode(t *testing.T) {
	const nodeTimeout, wait = 2 * time.Second, time.Second
	c := redistest.StartCluster(t, 3)
	holder := lockClient(t, c, redlock.WithNodeTimeout(nodeTimeout))
	l, err := holder.TryAcquire(within(t, 10*time.Second), "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.Background()) }()

	slow := make([]redis.UniversalClient, len(c.Nodes))
	for i, n := range c.Nodes {
		o := redistest.ClientOptions(n.Addr())
		o.ReadTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second
		cl := redis.NewClient(o)
		t.Cleanup(func() { _ = cl.Close() })
		slow[i] = cl
	}
	waiter, err := redlock.New(slow, redlock.WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	c.Nodes[2].BlackHole()
	defer c.Nodes[2].Heal()

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err = waiter.Acquire(ctx, "r", 30*time.Second)
	took := time.Since(start)
	// The deadline is the error; ErrLocked joins it when an attempt was
	// decided before the deadline, which a loaded machine may not allow.
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want the deadline", err)
	}
	if late := took - wait; late > nodeTimeout/2 {
		t.Fatalf("Acquire returned %v after its deadline (node timeout %v)", late.Round(time.Millisecond), nodeTimeout)
	}
	t.Logf("returned %v after a %v deadline", took.Round(time.Millisecond), wait)
}
