package integration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// handoverTimeout is the node timeout of these tests: generous, so that a
// loaded machine never turns a slow answer into a failure (it also makes the
// waiter queue's lease seconds long, so a live waiter never loses its place).
const handoverTimeout = 500 * time.Millisecond

// TestFIFOAcrossClients: waiters of separate clients (processes) get the
// lock in the order they started waiting, and a newcomer hammering
// TryAcquire never gets it while they wait.
func TestFIFOAcrossClients(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	holder := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	l := holdOnAllNodes(t, holder, "sku", time.Minute)
	const waiters = 4
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	var served atomic.Int32
	for i := range waiters {
		cl := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
		wg.Go(func() {
			lw, err := cl.Acquire(within(t, time.Minute), "sku", time.Minute)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			served.Add(1)
			if err := lw.Release(context.Background()); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
		waitQueued(t, c, "sku", int64(i+1)) // queued before the next one starts
	}
	newcomer := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	barged := make(chan int32, 1)
	go func() {
		defer close(barged)
		for served.Load() < waiters {
			nl, err := newcomer.TryAcquire(within(t, 10*time.Second), "sku", time.Minute)
			if err == nil {
				barged <- served.Load()
				_ = nl.Release(context.Background())
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n, ok := <-barged; ok && n < waiters {
		t.Fatalf("TryAcquire took the lock after %d of %d queued waiters were served", n, waiters)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("served in order %v, want 0..%d", order, waiters-1)
		}
	}
}

// waitQueued waits until n waiters are queued for resource on every node
// (the queue's sorted set, docs/design/HANDOVER.md), at most 20s.
func waitQueued(t *testing.T, c *redistest.Cluster, resource string, n int64) {
	t.Helper()
	key := "asynqlock:{" + resource + "}:q" // under the default key prefix
	deadline := time.Now().Add(20 * time.Second)
	for _, node := range c.Nodes {
		cl := node.Client(t)
		for cl.ZCard(context.Background(), key).Val() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters not queued on %s within 20s", n, node.Addr())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestFencesGrowAcrossHandOvers: fenced holders take turns, first the
// goroutines of one client (local hand-overs), then those of two clients
// (local hand-overs and the nodes' queue); every holder's fence is larger
// than the one before it.
func TestFencesGrowAcrossHandOvers(t *testing.T) {
	t.Parallel() // its own servers; nothing timed
	c := redistest.StartCluster(t, 5)
	var handovers atomic.Int64
	obs := locktest.OnHandOver(func(err error) {
		if err == nil {
			handovers.Add(1)
		}
	})
	clients := []*redlock.Client{
		lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout), obs),
		lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout), obs),
	}
	var mu sync.Mutex
	var fences []int64
	run := func(clients []*redlock.Client) {
		var wg sync.WaitGroup
		for g := range 6 {
			cl := clients[g%len(clients)]
			wg.Go(func() {
				for range 10 {
					l, err := cl.Acquire(within(t, time.Minute), "ledger", 10*time.Second, redlock.WithFencing())
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock() // exclusive while the lock is held: appends are in holding order
					fences = append(fences, l.Fence())
					mu.Unlock()
					time.Sleep(time.Millisecond)
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(clients[:1])
	if handovers.Load() == 0 {
		t.Fatal("no local hand-over among the waiters of one client: the test does not exercise it")
	}
	run(clients)
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("holder %d got fence %d after %d", i, fences[i], fences[i-1])
		}
	}
	t.Logf("%d holders, %d local hand-overs", len(fences), handovers.Load())
}

// TestStaleHolderAfterHandOverIsRejected: a holder whose lock was handed
// over (locally or to another client) and who writes late carries a smaller
// fence than its successor's write, so the fenced store rejects it.
func TestStaleHolderAfterHandOverIsRejected(t *testing.T) {
	t.Parallel() // its own servers; nothing timed (the 200ms for queueing is no bound)
	c := redistest.StartCluster(t, 3)
	store := redistest.StartNode(t).Client(t)
	ctx := within(t, time.Minute)
	write := func(fence int64, v string) bool {
		n, err := fencedWriteScript.Run(ctx, store, []string{"reg", "reg:fence"}, fence, v).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	a := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	b := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	stale, err := a.Acquire(ctx, "reg", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	for _, succ := range []*redlock.Client{a, b} { // local, then remote
		next := make(chan *redlock.Lock, 1)
		go func() {
			l, err := succ.Acquire(ctx, "reg", time.Minute, redlock.WithFencing())
			if err != nil {
				t.Error(err)
			}
			next <- l
		}()
		time.Sleep(200 * time.Millisecond) // queued
		if err := stale.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		l := <-next
		if l == nil {
			return
		}
		if !write(l.Fence(), "successor") {
			t.Fatalf("successor's write with fence %d rejected", l.Fence())
		}
		if write(stale.Fence(), "stale") {
			t.Fatalf("stale holder's late write with fence %d accepted after fence %d", stale.Fence(), l.Fence())
		}
		stale = l
	}
	_ = stale.Release(context.Background())
}

// TestSuccessorGivingUpDoesNotStrandTheResource: a waiter whose context is
// cancelled while the lock is being handed to it, and a queued waiter of
// another process that died, never keep the resource from the next waiter
// for anything like a TTL.
func TestSuccessorGivingUpDoesNotStrandTheResource(t *testing.T) {
	t.Parallel() // its own servers; its one bound is half a minute
	c := redistest.StartCluster(t, 3)
	const ttl = time.Minute
	a := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	holder, err := a.Acquire(within(t, 10*time.Second), "r", ttl, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// The head of the nodes' queue: a client that then dies without leaving.
	dead := lockClient(t, c, redlock.WithNodeTimeout(handoverTimeout))
	deadDone := make(chan error, 1)
	go func() { _, err := dead.Acquire(within(t, time.Minute), "r", ttl); deadDone <- err }()
	time.Sleep(200 * time.Millisecond)
	// A local waiter that gives up mid hand-over, and one behind it.
	qctx, quit := context.WithCancel(context.Background())
	defer quit()
	quitter := make(chan error, 1)
	go func() {
		l, err := a.Acquire(qctx, "r", ttl, redlock.WithFencing())
		if err == nil { // the hand-over beat the cancellation: pass it on
			err = l.Release(context.Background())
		}
		quitter <- err
	}()
	time.Sleep(100 * time.Millisecond)
	next := make(chan error, 1)
	go func() {
		l, err := a.Acquire(within(t, time.Minute), "r", ttl, redlock.WithFencing())
		if err == nil {
			err = l.Release(context.Background())
		}
		next <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = dead.Close()
	if err := <-deadDone; !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("dead waiter: %v", err)
	}
	for _, n := range c.Nodes {
		n.SetLatency(30 * time.Millisecond) // the hand-over round takes a while
	}
	released := time.Now()
	go func() { _ = holder.Release(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	quit()
	if err := <-quitter; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v", err)
	}
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(ttl / 2):
		t.Fatal("the next waiter still waits half a TTL after the release")
	}
	t.Logf("next waiter served %v after the release", time.Since(released))
}
