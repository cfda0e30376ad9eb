package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// contention runs workers goroutines spread over clients independent Clients,
// each repeatedly locking one of keys and doing a non-atomic read-modify-write
// of that key's register inside the critical section, until d has passed or
// maxOps sections were done. It returns the sections done per key and fails
// the test on any overlap or lost update.
func contention(t *testing.T, clients []*redlock.Client, workers int, keys []string, d time.Duration, maxOps int64) map[string]int64 {
	t.Helper()
	type register struct {
		value  atomic.Int64 // read and written in two steps: only the lock keeps updates from being lost
		inside atomic.Int32
	}
	regs := map[string]*register{}
	for _, k := range keys {
		regs[k] = &register{}
	}
	var done, overlaps, errs atomic.Int64
	counts := make([]map[string]int64, workers)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		counts[w] = map[string]int64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[w%len(clients)]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(deadline) && done.Load() < maxOps {
				key := keys[rng.IntN(len(keys))]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := cl.Acquire(ctx, key, 2*time.Second)
				cancel()
				if err != nil {
					errs.Add(1)
					t.Errorf("worker %d: acquire %s: %v", w, key, err)
					return
				}
				r := regs[key]
				if !r.inside.CompareAndSwap(0, 1) {
					overlaps.Add(1)
				}
				v := r.value.Load()
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				r.value.Store(v + 1)
				r.inside.Store(0)
				if time.Now().After(l.Until()) {
					t.Errorf("critical section outlived the lock's validity")
				}
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("worker %d: release: %v", w, err)
				}
				counts[w][key]++
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	total := map[string]int64{}
	for _, c := range counts {
		for k, n := range c {
			total[k] += n
		}
	}
	for _, k := range keys {
		if got := regs[k].value.Load(); got != total[k] {
			t.Fatalf("key %s: register %d after %d locked increments: %d updates lost", k, got, total[k], total[k]-got)
		}
	}
	t.Logf("%d critical sections over %d keys by %d workers on %d clients, none overlapping, none lost", done.Load(), len(keys), workers, len(clients))
	return total
}

// TestMutualExclusionUnderContention: 32 goroutines on four independent
// clients (two with the in-process queue, two without) contend on three keys.
func TestMutualExclusionUnderContention(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	// Not a timing test: a node timeout that survives a loaded machine.
	opts := []redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond)}
	clients := []*redlock.Client{
		lockClient(t, c, opts...),
		lockClient(t, c, opts...),
		lockClient(t, c, append(opts, locktest.WithLocalQueue(false))...),
		lockClient(t, c, append(opts, locktest.WithLocalQueue(false))...),
	}
	total := contention(t, clients, 32, []string{"sku-a", "sku-b", "sku-c"}, 3*time.Second, 20000)
	for k, n := range total {
		if n == 0 {
			t.Fatalf("key %s never locked", k)
		}
	}
}

// TestTwoOfFiveNodesDown: with two nodes killed the lock still works and
// still excludes.
func TestTwoOfFiveNodesDown(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	// Not a timing test: a node timeout that survives a loaded machine.
	opts := []redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond)}
	clients := []*redlock.Client{lockClient(t, c, opts...), lockClient(t, c, opts...)}
	for _, n := range c.Nodes[:2] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	contention(t, clients, 8, []string{"k"}, time.Second, 2000)
}

// TestThreeOfFiveNodesDown: without a majority, TryAcquire fails with
// ErrQuorum within about the node timeout (no dial retries), and Acquire
// returns its context's error wrapping ErrQuorum. Killed nodes refuse at
// once; stopped (SIGSTOP) nodes cost exactly one node timeout per attempt.
func TestThreeOfFiveNodesDown(t *testing.T) {
	const nodeTimeout = 300 * time.Millisecond
	for _, fault := range []string{"killed", "stopped"} {
		t.Run(fault, func(t *testing.T) {
			c := redistest.StartCluster(t, 5)
			cl := lockClient(t, c, redlock.WithNodeTimeout(nodeTimeout))
			for _, n := range c.Nodes[:3] {
				var err error
				if fault == "killed" {
					err = n.Kill()
				} else {
					err = n.Stop()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				start := time.Now()
				_, err := cl.TryAcquire(context.Background(), "r", 5*time.Second)
				took := time.Since(start)
				if !errors.Is(err, redlock.ErrQuorum) || errors.Is(err, redlock.ErrLocked) {
					t.Fatalf("got %v, want ErrQuorum", err)
				}
				var ne *redlock.NodeError
				if !errors.As(err, &ne) {
					t.Fatalf("no per-node cause in %v", err)
				}
				// Bounded by the node timeout, not by the client's dial and
				// read timeouts or retries (seconds); the slack is for a
				// loaded CI machine.
				if took > nodeTimeout+time.Second {
					t.Fatalf("TryAcquire took %v with node timeout %v", took, nodeTimeout)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := cl.Acquire(ctx, "r", 5*time.Second)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrQuorum) {
				t.Fatalf("Acquire: %v, want DeadlineExceeded wrapping ErrQuorum", err)
			}
		})
	}
}

// TestStoppedNodeDoesNotSlowAcquisition: one SIGSTOPped node out of five is
// never waited for: every acquire and release returns well within the node
// timeout, and the lock keeps working.
func TestStoppedNodeDoesNotSlowAcquisition(t *testing.T) {
	const nodeTimeout = 2 * time.Second
	c := redistest.StartCluster(t, 5)
	cl := lockClient(t, c, redlock.WithNodeTimeout(nodeTimeout))
	if err := c.Nodes[2].Stop(); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i := range 50 {
		start := time.Now()
		l, err := cl.TryAcquire(context.Background(), fmt.Sprintf("r%d", i%5), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
	}
	if slowest >= nodeTimeout/2 {
		t.Fatalf("slowest acquire+release %v: the stopped node was waited for (node timeout %v)", slowest, nodeTimeout)
	}
	t.Logf("slowest acquire+release with a stopped node: %v (node timeout %v)", slowest, nodeTimeout)
}

// TestDelayedRestartKeepsSafety follows the delayed-restart rule: nodes that
// lose their data come back only after the largest TTL. A holder keeps its
// lock alive throughout; another client never gets the lock while the holder
// believes it holds it, and gets it only after the holder saw the loss.
func TestDelayedRestartKeepsSafety(t *testing.T) {
	const ttl = time.Second
	c := redistest.StartCluster(t, 5)
	opts := []redlock.Option{redlock.WithNodeTimeout(300 * time.Millisecond)}
	a, b := lockClient(t, c, opts...), lockClient(t, c, opts...)
	l, err := a.TryAcquire(context.Background(), "res", ttl)
	if err != nil {
		t.Fatal(err)
	}
	held, cancel := l.KeepAlive(context.Background())
	defer cancel()

	var lostAt atomic.Int64 // ns since start, when A saw the loss
	start := time.Now()
	go func() {
		<-held.Done()
		lostAt.Store(int64(time.Since(start)))
	}()

	// B probes all along; it must fail while A holds.
	stop := make(chan struct{})
	var probeWG sync.WaitGroup
	var bGot atomic.Int64
	probeWG.Add(1)
	go func() {
		defer probeWG.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			lb, err := b.TryAcquire(context.Background(), "res", ttl)
			if err == nil {
				bGot.Store(int64(time.Since(start)))
				_ = lb.Release(context.Background())
				return
			}
		}
	}()

	// Two nodes crash and come back empty after the delayed-restart wait.
	for _, n := range c.Nodes[:2] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes[:2] {
		if err := n.Restart(ttl + 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl)
	if held.Err() != nil {
		t.Fatalf("holder lost its lock with 3 of 5 nodes keeping it: %v", context.Cause(held))
	}
	if bGot.Load() != 0 {
		t.Fatal("another client acquired the lock while the holder kept a majority")
	}

	// A third node crashes: the holder can no longer prove a majority and
	// must see the loss before anyone else acquires.
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * ttl):
		t.Fatal("holder never saw the loss of its majority")
	}
	if cause := context.Cause(held); !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	deadline := time.Now().Add(5 * ttl)
	for bGot.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	probeWG.Wait()
	if bGot.Load() == 0 {
		t.Fatal("no one got the lock after the holder lost it")
	}
	if bGot.Load() < lostAt.Load() {
		t.Fatalf("B acquired at %v, before A saw its loss at %v: mutual exclusion broken",
			time.Duration(bGot.Load()), time.Duration(lostAt.Load()))
	}
}

// TestKeepAliveCancelsBeforeUntilOnMajorityLoss: when three of five nodes
// become unreachable (black-holed), the holder's context is cancelled with
// ErrLockLost no later than Until.
func TestKeepAliveCancelsBeforeUntilOnMajorityLoss(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	cl := lockClient(t, c, redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := cl.TryAcquire(context.Background(), "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := l.KeepAlive(context.Background())
	defer cancel()
	time.Sleep(1500 * time.Millisecond) // a few extensions succeed first
	if ctx.Err() != nil {
		t.Fatalf("lost while all nodes were up: %v", context.Cause(ctx))
	}
	for _, n := range c.Nodes[:3] {
		n.BlackHole()
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes[:3] {
			n.Heal()
		}
	})
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("keep-alive never reported the loss")
	}
	at := time.Now()
	if until := l.Until(); at.After(until) {
		t.Fatalf("loss seen %v after Until", at.Sub(until))
	}
	if !errors.Is(context.Cause(ctx), redlock.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost() not closed")
	}
}

// TestFencingMonotonicAcrossShiftingQuorums: successive fenced acquisitions
// through changing subsets of nodes (one refused or black-holed each time:
// a fence needs 4 of 5 nodes; one node wiped once) always get a larger fence. A black hole delivers what
// it held when healed, so a SET can land after its sender gave up: the short
// TTL bounds how long such a stray key blocks the next round.
func TestFencingMonotonicAcrossShiftingQuorums(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	cl := lockClient(t, c, redlock.WithNodeTimeout(100*time.Millisecond))
	rng := rand.New(rand.NewPCG(3, 4))
	var last int64
	for i := range 30 {
		down := rng.Perm(5)[:1]
		for j, d := range down {
			if (i+j)%3 == 0 {
				c.Nodes[d].BlackHole()
			} else {
				c.Nodes[d].Refuse()
			}
		}
		if i == 15 {
			// A node in the majority loses its data (it is healthy
			// otherwise): the other nodes still carry the counter.
			up := rng.Perm(5)
			for _, u := range up {
				if u != down[0] {
					if err := c.Nodes[u].Kill(); err != nil {
						t.Fatal(err)
					}
					if err := c.Nodes[u].Restart(0); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		}
		l, err := cl.Acquire(within(t, 10*time.Second), "ledger", time.Second, redlock.WithFencing())
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("round %d: release: %v", i, err)
		}
		for _, d := range down {
			c.Nodes[d].Heal()
		}
	}
}

// TestWakeOnRelease: a waiter on another client is woken by the release
// announcement, long before its retry delay would have let it try again;
// with clients of both protocols.
func TestWakeOnRelease(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			testWakeOnRelease(t, kind.make)
		})
	}
}

func testWakeOnRelease(t *testing.T, newClient func(testing.TB, *redistest.Cluster, ...redlock.Option) *redlock.Client) {
	c := redistest.StartCluster(t, 5)
	holder := newClient(t, c)
	const retry = 10 * time.Second
	waiter := newClient(t, c, redlock.WithRetryDelay(retry, retry))
	l, err := holder.TryAcquire(context.Background(), "hot", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Duration, 1)
	var releasedAt time.Time
	var mu sync.Mutex
	go func() {
		lw, err := waiter.Acquire(within(t, 30*time.Second), "hot", time.Minute)
		if err != nil {
			t.Error(err)
			got <- -1
			return
		}
		mu.Lock()
		got <- time.Since(releasedAt)
		mu.Unlock()
		_ = lw.Release(context.Background())
	}()
	time.Sleep(300 * time.Millisecond) // the waiter has failed and subscribed
	mu.Lock()
	releasedAt = time.Now()
	mu.Unlock()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d < 0 {
			return
		}
		if d >= retry/2 {
			t.Fatalf("waiter took %v after the release: it waited for its retry delay, not the announcement", d)
		}
		t.Logf("waiter acquired %v after the release", d)
	case <-time.After(retry):
		t.Fatal("waiter not woken by the release")
	}
}

// TestInspect shows the holder and TTL on every node, and a dead node's
// error; with clients of both protocols.
func TestInspect(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			testInspect(t, kind.make)
		})
	}
}

func testInspect(t *testing.T, newClient func(testing.TB, *redistest.Cluster, ...redlock.Option) *redlock.Client) {
	c := redistest.StartCluster(t, 3)
	cl := newClient(t, c, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := cl.TryAcquire(context.Background(), "inv", 10*time.Second, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// The same client's calls reach each node in order, so Inspect sees
	// every node that took the lock.
	states, err := cl.Inspect(context.Background(), "inv")
	if err != nil {
		t.Fatal(err)
	}
	holding, fenced := 0, 0
	for _, s := range states {
		if s.Err != nil {
			t.Fatalf("node %d: %v", s.Node, s.Err)
		}
		if s.Token == "" {
			continue
		}
		holding++
		if s.Token != l.Token() || s.TTL <= 0 || s.TTL > 10*time.Second || s.Fence <= 0 {
			t.Fatalf("node %d: %+v, want holder %s with a TTL and a fencing counter", s.Node, s, l.Token())
		}
		if s.Fence >= l.Fence() {
			fenced++
		}
	}
	// A node that answered after the quorum may have a lower counter; a
	// majority carries the fence.
	if holding < 2 || fenced < 2 {
		t.Fatalf("%d nodes hold the lock, %d carry its fence %d; want a majority of 3", holding, fenced, l.Fence())
	}
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	states, err = cl.Inspect(context.Background(), "inv")
	if err != nil {
		t.Fatal(err)
	}
	if states[2].Err == nil || states[2].Token != "" {
		t.Fatalf("dead node reported %+v", states[2])
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	states, err = cl.Inspect(context.Background(), "inv")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states[:2] {
		if s.Token != "" {
			t.Fatalf("node %d still held after release: %+v", s.Node, s)
		}
	}
}
