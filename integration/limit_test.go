package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// limitRun is what limitContention saw.
type limitRun struct {
	ops, peak int64
	slots     map[int]int64 // acquisitions per slot
}

// limitContention has workers on the clients (round robin) take resource
// WithLimit(n) until maxOps acquisitions or d passed, each holding it a
// moment; it fails the test when more than n hold it at once or one slot
// has two holders. midway runs once, after a third of maxOps.
func limitContention(t *testing.T, clients []*redlock.Client, workers, n int, d time.Duration, maxOps int64, midway func()) limitRun {
	t.Helper()
	var inside, peak, done atomic.Int64
	slotIn := make([]atomic.Int32, n)
	var mu sync.Mutex
	slots := map[int]int64{}
	var once sync.Once
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			cl := clients[w%len(clients)]
			rng := rand.New(rand.NewPCG(uint64(w), 21))
			for time.Now().Before(deadline) && done.Load() < maxOps {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := cl.Acquire(ctx, "tenant", 5*time.Second, redlock.WithLimit(n))
				cancel()
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				s := l.Slot()
				if !slotIn[s].CompareAndSwap(0, 1) {
					t.Errorf("slot %d held twice at once", s)
				}
				now := inside.Add(1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				if now > int64(n) {
					t.Errorf("%d holders at once with limit %d", now, n)
				}
				time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Microsecond)
				inside.Add(-1)
				slotIn[s].Store(0)
				if err := l.Release(context.Background()); err != nil && !errors.Is(err, redlock.ErrQuorum) {
					t.Errorf("worker %d: release: %v", w, err)
				}
				mu.Lock()
				slots[s]++
				mu.Unlock()
				if done.Add(1) == maxOps/3 && midway != nil {
					once.Do(midway)
				}
			}
		})
	}
	wg.Wait()
	return limitRun{ops: done.Load(), peak: peak.Load(), slots: slots}
}

// TestLimitAtMostNHoldersWithANodeKilled: twelve workers on four
// independent clients (as four processes; two without the in-process
// queue) share a resource WithLimit(3) on five redis-server nodes, one of
// them killed a third of the way: never more than 3 holders, never two on
// one slot, and all 3 slots held at once at some point.
func TestLimitAtMostNHoldersWithANodeKilled(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	opts := []redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond)}
	clients := []*redlock.Client{
		lockClient(t, c, opts...),
		urlLockClient(t, c, opts...),
		lockClient(t, c, append(opts, locktest.WithLocalQueue(false))...),
		lockClient(t, c, append(opts, locktest.WithLocalQueue(false))...),
	}
	const n = 3
	run := limitContention(t, clients, 12, n, 20*time.Second, 900, func() {
		if err := c.Nodes[4].Kill(); err != nil {
			t.Error(err)
		}
	})
	for s := range n {
		if run.slots[s] == 0 {
			t.Errorf("slot %d never held (%v)", s, run.slots)
		}
	}
	t.Logf("%d acquisitions, peak %d holders, per slot %v", run.ops, run.peak, run.slots)
	// Control: the bound above is not kept by holding fewer (how often n
	// overlapped in the run depends on the machine's load: on a loaded CI
	// machine one run peaked at 2).
	holdEverySlot(t, clients[0], clients[n], "tenant", n)
}

// holdEverySlot checks that the n slots of res can be held at once, by
// holder, with its nodes as they are, and that other is then refused.
func holdEverySlot(t *testing.T, holder, other *redlock.Client, res string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		l, err := holder.Acquire(ctx, res, 10*time.Second, redlock.WithLimit(n))
		if err != nil {
			t.Fatalf("holder %d of %d: %v", i+1, n, err)
		}
		defer l.Release(context.Background())
	}
	if _, err := other.TryAcquire(ctx, res, 10*time.Second, redlock.WithLimit(n)); !errors.Is(err, redlock.ErrLocked) {
		t.Errorf("a holder past the limit of %d: %v, want ErrLocked", n, err)
	}
}

// TestLimitChangeOnServers: on redis-server nodes, a caller with another
// limit shares the slots (at most the larger limit held), and a caller
// without a limit waits for slot 0 (ErrLocked).
func TestLimitChangeOnServers(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	a := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	b := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	ctx := within(t, time.Minute)
	l, err := a.Acquire(ctx, "r", 10*time.Second, redlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := b.TryAcquire(ctx, "r", 10*time.Second, redlock.WithLimit(4)); err != nil {
			t.Fatalf("limit 4 beside one holder of limit 3: %v", err)
		}
	}
	if _, err := b.TryAcquire(ctx, "r", 10*time.Second, redlock.WithLimit(4)); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("a fifth holder beside limits 3 and 4: %v, want ErrLocked", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(short, "r", 10*time.Second); !errors.Is(err, redlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no limit beside slots: %v, want a wait that ends with its context (ErrLocked)", err)
	}
	if _, err := b.TryAcquire(ctx, "r", 10*time.Second, redlock.WithLimit(0)); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", err)
	}
	states, err := b.Inspect(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, s := range states {
		if s.Token == l.Token() && s.Slot == l.Slot() && s.Limit == 4 {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("Inspect shows the slot's token on %d of 3 nodes: %+v", held, states)
	}
}

// TestLimitFencesOnServers: on redis-server nodes (real Lua, whose numbers
// are doubles), each slot's fences are of its class modulo fenceClasses, seeded
// from the nodes' clocks in microseconds, and they grow across every slot: all
// n held at once hold n different fences.
func TestLimitFencesOnServers(t *testing.T) {
	const fenceClasses = 1024 // docs/design/REDLOCK.md, "Limits"
	c := redistest.StartCluster(t, 3)
	a := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	ctx := within(t, time.Minute)
	const n = 3
	var last int64
	var held []*redlock.Lock
	for i := range 12 {
		l, err := a.TryAcquire(ctx, "r", 10*time.Second, redlock.WithLimit(n), redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last || l.Fence()%fenceClasses != int64(l.Slot()) {
			t.Fatalf("acquisition %d: slot %d, fence %d after %d: want larger and %d modulo %d", i, l.Slot(), l.Fence(), last, l.Slot(), fenceClasses)
		}
		last = l.Fence()
		if held = append(held, l); len(held) == n {
			_ = held[0].Release(ctx)
			held = held[1:]
		}
	}
	if last < time.Now().Add(-time.Hour).UnixMicro() {
		t.Fatalf("fence %d: not seeded from the nodes' clocks", last)
	}
}
