package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// TestFenceNeverFollowsALargerOneAfterADataLoss (issue 20, finding 2): with
// 5 nodes (a fence needs 4 carriers), X's fenced round is set on nodes 0-2
// (counters C+1), node 1's answer comes 60ms late, nodes 3 and 4 fail X's
// call. Node 0 loses its data at once; Y takes nodes 0, 3 and 4, gets fence
// S (node 0 seeds it from its clock) and raises it onto 1, 2 and 3; its
// raise on node 4 is slow. X's late answer then decides X's round: it must
// not hand out C+1 after S. Node 0 answered C+1 before it lost it, and node
// 3 holds S: X may count neither as carrying C+1. Acquire and hand-over
// paths alike.
func TestFenceNeverFollowsALargerOneAfterADataLoss(t *testing.T) {
	for _, path := range []string{"acquire", "hand-over"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { fenceAfterLoss(t, path) })
		})
	}
}

func fenceAfterLoss(t *testing.T, path string) {
	ctx := context.Background()
	opts := []Option{WithNodeTimeout(100 * time.Millisecond)}
	x, mems := memClient(t, 5, opts...)
	y := memClientOn(t, mems, opts...)
	// The faults are installed before any call (the workers read do), and
	// switched on by the flags.
	var lag, refuse, slow atomic.Bool
	x.nodes[1].Do = lagged(mems[1], &lag, 60*time.Millisecond)
	for _, i := range []int{3, 4} {
		x.nodes[i].Do = refusingLocks(mems[i], &refuse)
	}
	y.nodes[4].Do = slowRaise(mems[4], &slow, 200*time.Millisecond)
	prime, err := y.TryAcquire(ctx, "r", time.Minute, WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	_ = prime.Release(ctx)
	time.Sleep(time.Second) // node clocks now seed counters far above C
	refuse.Store(true)
	slow.Store(true)
	var got <-chan acquired
	if path == "acquire" {
		lag.Store(true)
		ch := make(chan acquired, 1)
		go func() {
			l, err := x.TryAcquire(ctx, "r", time.Minute, WithFencing())
			ch <- acquired{l, err, time.Now()}
		}()
		got = ch
	} else {
		h, err := x.Acquire(ctx, "r", time.Minute, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		got = waitFor(ctx, x, "r", time.Minute, WithFencing())
		synctest.Wait()
		lag.Store(true)
		go func() { _ = h.Release(ctx) }()
	}
	synctest.Wait() // X's call ran on nodes 0-2; node 1's answer is late
	mems[0].set(func(m *memNode) { m.data = make(map[string]memEntry) })
	ly, err := y.TryAcquire(ctx, "r", time.Minute, WithFencing())
	if err != nil {
		t.Fatalf("Y: %v", err)
	}
	g := <-got
	if g.err == nil && g.l.Fence() <= ly.Fence() {
		t.Fatalf("X got fence %d after Y got %d", g.l.Fence(), ly.Fence())
	}
}

// lagged runs a batch on m and, while on is set, answers d later.
func lagged(m *memNode, on *atomic.Bool, d time.Duration) func(context.Context, []*redis.Cmd) {
	return func(ctx context.Context, cmds []*redis.Cmd) {
		m.do(ctx, cmds)
		if on.Load() {
			time.Sleep(d)
		}
	}
}

// refusingLocks fails, while on is set, every batch that would take the
// lock (fenced acquire, turn), as a node that drops the connection; other
// batches (fence raises) run on m.
func refusingLocks(m *memNode, on *atomic.Bool) func(context.Context, []*redis.Cmd) {
	return func(ctx context.Context, cmds []*redis.Cmd) {
		if on.Load() && sends(cmds, fenceAcquireScript, turnScript) {
			for _, c := range cmds {
				c.SetErr(errMemDown)
			}
			return
		}
		m.do(ctx, cmds)
	}
}

// slowRaise runs fence raises on m only after d, while on is set.
func slowRaise(m *memNode, on *atomic.Bool, d time.Duration) func(context.Context, []*redis.Cmd) {
	return func(ctx context.Context, cmds []*redis.Cmd) {
		if on.Load() && sends(cmds, fenceRaiseScript) {
			time.Sleep(d)
		}
		m.do(ctx, cmds)
	}
}

// sends reports whether a batch runs one of the scripts.
func sends(cmds []*redis.Cmd, scripts ...*transport.Script) bool {
	for _, c := range cmds {
		a := c.Args()
		if len(a) < 2 {
			continue
		}
		for _, s := range scripts {
			if str(a[1]) == s.SHA || str(a[1]) == s.Src {
				return true
			}
		}
	}
	return false
}
