package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// holdSlotsOnAllNodes takes the n slots of resource WithLimit(n) with cl
// and waits (at most 20s) until every node holds each slot's token, for
// tests whose scenario starts from full slots on every node.
func holdSlotsOnAllNodes(t *testing.T, c *redistest.Cluster, cl *redlock.Client, resource string, n int) []*redlock.Lock {
	t.Helper()
	ctx := within(t, time.Minute)
	held := make([]*redlock.Lock, 0, n)
	for range n {
		l, err := cl.TryAcquire(ctx, resource, time.Minute, redlock.WithLimit(n))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, node := range c.Nodes {
		nc := node.Client(t)
		for _, l := range held {
			key := "asynqlock:{" + resource + "}" // slot 0: the resource's own key
			if l.Slot() > 0 {
				key += ":slot:" + strconv.Itoa(l.Slot())
			}
			for nc.Get(ctx, key).Val() != l.Token() {
				if time.Now().After(deadline) {
					t.Fatalf("slot %d not held on %s within 20s", l.Slot(), node.Addr())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return held
}

// TestLimitFIFOAcrossClients: on redis-server nodes, four waiters of four
// clients (as four processes) queue in a known order for a resource of 2
// full slots; slots released one by one go to them in arrival order, and
// a newcomer polling with TryAcquire all along never takes a slot while
// they wait (each release reserves its slot for the queue). The control
// that this order can fail without the nodes' queue is the redlock
// package's TestLimitWithoutTheQueueTheLastWaiterGoesFirst.
func TestLimitFIFOAcrossClients(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	opt := redlock.WithNodeTimeout(handoverTimeout)
	held := holdSlotsOnAllNodes(t, c, lockClient(t, c, opt), "tenant", 2)
	type arrival struct {
		i   int
		l   *redlock.Lock
		err error
	}
	const waiters = 4
	arrivals := make(chan arrival, waiters)
	for i := range waiters {
		cl, ctx := lockClient(t, c, opt), within(t, 2*time.Minute)
		go func() {
			l, err := cl.Acquire(ctx, "tenant", time.Minute, redlock.WithLimit(2))
			arrivals <- arrival{i, l, err}
		}()
		waitQueued(t, c, "tenant", int64(i+1)) // queued before the next one starts
	}
	poll, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	barged := pollSlots(poll, lockClient(t, c, opt), "tenant", 2)
	for want := range waiters {
		if err := held[0].Release(within(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		got := <-arrivals
		if got.err != nil {
			t.Fatalf("waiter %d: %v", got.i, got.err)
		}
		if got.i != want {
			t.Fatalf("waiter %d got a slot before waiter %d, which came first", got.i, want)
		}
		held = append(held[1:], got.l)
	}
	stop()
	if s, ok := <-barged; ok {
		t.Fatalf("TryAcquire took slot %d while waiters were queued", s)
	}
	for _, l := range held {
		_ = l.Release(context.Background())
	}
}

// pollSlots has cl try resource WithLimit(n) every 2ms until ctx ends (at
// most 100000 times); the channel gets the slot of a success, and is
// closed when the polling ends.
func pollSlots(ctx context.Context, cl *redlock.Client, resource string, n int) <-chan int {
	barged := make(chan int, 1)
	go func() {
		defer close(barged)
		for range 100000 {
			if ctx.Err() != nil {
				return
			}
			if l, err := cl.TryAcquire(ctx, resource, time.Minute, redlock.WithLimit(n)); err == nil {
				barged <- l.Slot()
				_ = l.Release(context.Background())
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return barged
}

// TestUncontendedSlotLockTakesTheFastPath: a slot's lock and unlock with
// nobody queued run none of the waiter queue's commands (the nodes count
// them, calls from scripts included: the queue's prelude reads the node's
// TIME and its sorted sets, and announcements PUBLISH); the control below shows the counts see a waiter that queues.
func TestUncontendedSlotLockTakesTheFastPath(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cl := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	ctx := within(t, 2*time.Minute)
	queueCmds := []string{"zadd", "zrange", "zrangebyscore", "time", "publish"}
	count := func() (n int) {
		for _, cmd := range queueCmds {
			n += sum(commandCalls(t, c, cmd))
		}
		return n
	}
	slotLockUnlock := func(resource string) {
		l, err := cl.Acquire(ctx, resource, 10*time.Second, redlock.WithLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Inspect(ctx, resource); err != nil { // runs after the release on each node
			t.Fatal(err)
		}
	}
	slotLockUnlock("warm-up")
	before := count()
	for i := range 20 {
		slotLockUnlock("free-" + strconv.Itoa(i))
	}
	if d := count() - before; d != 0 {
		t.Errorf("20 uncontended slot locks ran %d of the queue's commands (%v), want none", d, queueCmds)
	}
	// Control: a waiter that meets full slots queues (ZADD on the nodes).
	holders := holdSlotsOnAllNodes(t, c, cl, "busy", 3)
	before = count()
	other := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	got := make(chan error, 1)
	go func() {
		l, err := other.Acquire(ctx, "busy", 10*time.Second, redlock.WithLimit(3))
		got <- err
		if err == nil {
			_ = l.Release(context.Background())
		}
	}()
	waitQueued(t, c, "busy", 1)
	if count() == before {
		t.Error("a queued waiter ran none of the counted commands: the counts cannot see the queue")
	}
	for _, l := range holders {
		_ = l.Release(ctx)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
