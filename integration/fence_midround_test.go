package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestProofFenceAfterDataLossMidRound (issue 20, finding 2), on 5 real
// nodes (a fence needs 4 carriers): X's fenced round is set on nodes 0-2,
// its answer from node 1 held back, its call refused by nodes 3 and 4.
// Node 0 then restarts without data at once; Y takes nodes 0, 3 and 4 and
// gets fence S, seeded on node 0 from its clock, which it raises onto nodes
// 1-3 (its raise on node 4 is held back). Then X's answer from node 1 comes:
// X must not be handed a fence at or below S. Node 0 answered X before it
// lost the counter, and node 3 carries S: neither may count as carrying X's.
// The answers are held back by go-redis hooks on the two clients, released
// by the test, so the interleaving is forced, not timed.
func TestProofFenceAfterDataLossMidRound(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	// The held answers must come within X's round, with room for a loaded
	// machine's pauses between holding and releasing them.
	opt := redlock.WithNodeTimeout(30 * time.Second)
	hold1, gateX, gateY := newGate(), make(chan struct{}), make(chan struct{})
	var openX, openY sync.Once
	releaseX := func() { openX.Do(func() { close(gateX) }) }
	releaseY := func() { openY.Do(func() { close(gateY) }) }
	refuse, slowRaise := &atomic.Bool{}, &atomic.Bool{}
	x := hookedClient(t, c, opt, map[int]redis.Hook{
		1: afterHook{armed: hold1, gate: gateX},
		3: refuseLocks{refuse}, 4: refuseLocks{refuse},
	})
	y := hookedClient(t, c, opt, map[int]redis.Hook{4: raiseHook{on: slowRaise, gate: gateY}})
	// Registered after the clients' Close, so run before it, whatever
	// happened: a held answer would keep Close waiting for its node worker.
	t.Cleanup(releaseX)
	t.Cleanup(releaseY)
	ctx := within(t, time.Minute)
	prime, err := y.TryAcquire(ctx, "ledger", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	_ = prime.Release(ctx)
	// Release returns at a quorum: a node that had not run it yet would
	// refuse X's round below, which then fails without node 0's key.
	for _, n := range c.Nodes {
		waitKey(t, n, "asynqlock:{ledger}", false)
	}

	refuse.Store(true)
	slowRaise.Store(true)
	hold1.arm()
	type result struct {
		l   *redlock.Lock
		err error
	}
	xr := make(chan result, 1)
	go func() {
		l, err := x.TryAcquire(ctx, "ledger", time.Minute, redlock.WithFencing())
		xr <- result{l, err}
	}()
	<-hold1.held // node 1 set X's key; its answer waits
	waitKey(t, c.Nodes[0], "asynqlock:{ledger}", true)
	if err := c.Nodes[0].Restart(0); err != nil {
		t.Fatal(err)
	}
	var ly *redlock.Lock
	for try := 0; ly == nil; try++ {
		// Y's first call to node 0 may meet the connection the restart
		// broke; the next one dials again.
		if ly, err = y.TryAcquire(ctx, "ledger", time.Minute, redlock.WithFencing()); err != nil && try == 10 {
			t.Fatalf("Y after node 0's data loss: %v", err)
		}
	}
	releaseX()
	got := <-xr
	releaseY()
	inverted := 0
	outcome := fmt.Sprintf("X refused: %v", got.err)
	if got.err == nil {
		outcome = fmt.Sprintf("X got fence %d", got.l.Fence())
		if got.l.Fence() <= ly.Fence() {
			inverted = 1
		}
	} else if !errors.Is(got.err, redlock.ErrQuorum) {
		t.Errorf("X: %v, want a fence above Y's or ErrQuorum", got.err)
	}
	report.Add(Row{
		Scenario: "fenced: 2 clients, 1 resource, 5 nodes, X's round still out",
		Fault:    "node 0 restarted without data at once between X's fenced round and its late answer",
		Ops:      2 - min(1, boolInt(got.err != nil)), Violations: inverted,
		Notes: fmt.Sprintf("Y got fence %d on nodes 0, 3 and 4 after the restart; %s (a raise that finds a larger counter makes X fence again above it, and only nodes that answer the raise count as carrying it)", ly.Fence(), outcome),
	})
	t.Log(outcome, "; Y's fence", ly.Fence())
	if inverted > 0 {
		t.Fatalf("X got fence %d after Y got %d", got.l.Fence(), ly.Fence())
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hookedClient is a lock client over the cluster whose node clients carry
// the given hooks.
func hookedClient(t *testing.T, c *redistest.Cluster, opt redlock.Option, hooks map[int]redis.Hook) *redlock.Client {
	t.Helper()
	clients := c.Clients(t)
	for i, h := range hooks {
		clients[i].AddHook(h)
	}
	cl, err := redlock.New(clients, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// waitKey waits (at most 20s) until key exists on the node, or (present
// false) until it does not.
func waitKey(t *testing.T, n *redistest.Node, key string, present bool) {
	t.Helper()
	direct := redistest.Client(t, n.ServerAddr())
	for range 2000 {
		if (direct.Exists(context.Background(), key).Val() == 1) == present {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still %s on %s after 20s", key, map[bool]string{true: "absent", false: "present"}[present], n.Addr())
}

// gate holds back one answer: armed once, the next lock-taking call runs,
// then its answer waits for the gate channel; held says it does.
type gate struct {
	on   atomic.Bool
	held chan struct{}
}

func newGate() *gate       { return &gate{held: make(chan struct{})} }
func (g *gate) arm()       { g.on.Store(true) }
func (g *gate) take() bool { return g.on.CompareAndSwap(true, false) }

// afterHook delays the answer of the first lock-taking call after arming.
type afterHook struct {
	armed *gate
	gate  chan struct{}
}

func (h afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })(ctx, []redis.Cmder{cmd})
	}
}
func (h afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if takesLock(cmds) && h.armed.take() {
			close(h.armed.held)
			<-h.gate
		}
		return err
	}
}

// refuseLocks fails lock-taking calls, unsent, while on is set.
type refuseLocks struct{ on *atomic.Bool }

func (h refuseLocks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h refuseLocks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })(ctx, []redis.Cmder{cmd})
	}
}
func (h refuseLocks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() && takesLock(cmds) {
			err := &net.OpError{Op: "write", Net: "tcp", Err: errors.New("connection refused (test)")}
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// raiseHook holds fence raises until gate closes, while on is set.
type raiseHook struct {
	on   *atomic.Bool
	gate chan struct{}
}

func (h raiseHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h raiseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })(ctx, []redis.Cmder{cmd})
	}
}
func (h raiseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.on.Load() && keyArgs(c) == 1 && strings.HasSuffix(argAt(c, 3), ":fence") {
				<-h.gate
				break
			}
		}
		return next(ctx, cmds)
	}
}

// takesLock reports whether a batch holds a script call that takes a lock
// key: the fenced acquire (lock and counter keys) or a turn (four keys).
func takesLock(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if n := keyArgs(c); n == 4 || n == 2 && strings.HasSuffix(argAt(c, 4), ":fence") {
			return true
		}
	}
	return false
}

// keyArgs is an EVAL/EVALSHA call's number of keys, 0 for other commands.
func keyArgs(c redis.Cmder) int {
	if name := strings.ToLower(argAt(c, 0)); name != "evalsha" && name != "eval" {
		return 0
	}
	var n int
	_, _ = fmt.Sscan(argAt(c, 2), &n)
	return n
}

func argAt(c redis.Cmder, i int) string {
	if a := c.Args(); i < len(a) {
		return fmt.Sprint(a[i])
	}
	return ""
}
