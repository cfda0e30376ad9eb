package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// servers starts n redis-servers and returns raw clients to them.
func servers(t *testing.T, n int) []*redis.Client {
	t.Helper()
	raws := make([]*redis.Client, n)
	for i := range raws {
		srv := redistest.StartServer(t)
		raws[i] = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = raws[i].Close() })
	}
	return raws
}

// wrappedClient builds a Client, as of one process, over the servers of
// raws, each node's batches going through wrap(i, run) (run sends them),
// installed before the nodes' workers start.
func wrappedClient(t *testing.T, raws []*redis.Client, wrap func(i int, run func(context.Context, []*redis.Cmd)) func(context.Context, []*redis.Cmd), opts ...Option) *Client {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range append([]Option{WithNodeTimeout(5 * time.Second)}, opts...) {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	nodes := make([]*transport.Node, len(raws))
	owned := make([]redis.UniversalClient, len(raws))
	for i, raw := range raws {
		cl := redis.NewClient(&redis.Options{Addr: raw.Options().Addr})
		owned[i] = cl
		nodes[i] = transport.NewNode(i, raw.Options().Addr, cl, transportEnv)
		if wrap != nil {
			nodes[i].Do = wrap(i, nodes[i].Do)
		}
	}
	c := start(cfg, nodes, owned)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// failing answers a batch that runs one of scripts with an error, as a node
// that dropped the connection; other batches go to run.
func failing(run func(context.Context, []*redis.Cmd), scripts ...*transport.Script) func(context.Context, []*redis.Cmd) {
	return func(ctx context.Context, cmds []*redis.Cmd) {
		if sends(cmds, scripts...) {
			for _, c := range cmds {
				c.SetErr(errMemDown)
			}
			return
		}
		run(ctx, cmds)
	}
}

// TestLimitFencesOfOverlappingSlotsDiffer: the counters of three nodes are
// 1000, 1000 and 10. X's round for a slot is set on nodes 0 and 2 (its call
// to node 1 fails) and answers 1001 and 11; its fence raise waits. Y's round
// for the other slot is set on nodes 1 and 2 (its call to node 0 fails) and
// answers 1001 and 12; Y raises 1001 everywhere. Then X raises 1001, which
// every node carries. With one counter step for all slots both would hold
// fence 1001 at once; each slot's fences are of their own class modulo n,
// so they differ, and each is of its slot's class.
func TestLimitFencesOfOverlappingSlotsDiffer(t *testing.T) {
	ctx := context.Background()
	raws := servers(t, 3)
	raised, release := make(chan struct{}), make(chan struct{})
	x, y := overlappingClients(t, raws, raised, release)
	k := x.keysFor("r")
	for i, c := range []int{1000, 1000, 10} {
		raws[i].Set(ctx, k.fenceKey, c, time.Hour)
	}
	const n = 2
	got := make(chan acquired, 1)
	go func() {
		l, err := x.TryAcquire(ctx, "r", time.Minute, WithLimit(n), WithFencing())
		got <- acquired{l: l, err: err}
	}()
	select {
	case <-raised: // X's round was answered by every node
	case g := <-got:
		t.Fatalf("X ended before raising its fence: %v", g.err)
	}
	// X's slot on node 1 (where its call failed) is taken there by someone
	// else, so that Y's round goes to the other slot at once, whatever slot
	// it tries first: the nodes' counters move only for a slot set.
	xs := -1
	for s := range n {
		if raws[0].Exists(ctx, slotKey(k.key, s)).Val() == 1 {
			xs = s
		}
	}
	raws[1].Set(ctx, slotKey(k.key, xs), "OTHER", time.Minute)
	ly, err := y.TryAcquire(ctx, "r", time.Minute, WithLimit(n), WithFencing())
	close(release)
	if err != nil {
		t.Fatalf("Y: %v", err)
	}
	gx := <-got
	if gx.err != nil {
		t.Fatalf("X: %v", gx.err)
	}
	lx := gx.l
	if lx.Slot() != xs || ly.Slot() == xs {
		t.Fatalf("X holds slot %d (set on node 0: %d), Y slot %d", lx.Slot(), xs, ly.Slot())
	}
	if lx.Fence() == ly.Fence() {
		t.Fatalf("X (slot %d) and Y (slot %d) hold the resource at once with the same fence %d", lx.Slot(), ly.Slot(), lx.Fence())
	}
	for _, l := range []*Lock{lx, ly} {
		if l.Fence()%n != int64(l.Slot()) {
			t.Errorf("slot %d holds fence %d, not of its class modulo %d", l.Slot(), l.Fence(), n)
		}
	}
}

// overlappingClients builds TestLimitFencesOfOverlappingSlotsDiffer's X,
// whose slot acquisitions fail on node 1 and whose fence raises wait for
// release (raised is closed at the first), and Y, whose slot acquisitions
// fail on node 0.
func overlappingClients(t *testing.T, raws []*redis.Client, raised, release chan struct{}) (x, y *Client) {
	var once sync.Once
	x = wrappedClient(t, raws, func(i int, run func(context.Context, []*redis.Cmd)) func(context.Context, []*redis.Cmd) {
		if i == 1 {
			run = failing(run, fenceAcquireScript)
		}
		return func(ctx context.Context, cmds []*redis.Cmd) {
			if sends(cmds, fenceRaiseScript) {
				once.Do(func() { close(raised) })
				<-release
			}
			run(ctx, cmds)
		}
	})
	y = wrappedClient(t, raws, func(i int, run func(context.Context, []*redis.Cmd)) func(context.Context, []*redis.Cmd) {
		if i == 0 {
			return failing(run, fenceAcquireScript)
		}
		return run
	})
	return x, y
}

// TestSlotFenceStepMatchesGo: fence_acquire.lua bumps a counter to the least
// value above it of the slot's class, as fenceStep.above says, also at
// counters of today's clock in microseconds (where Lua's % on doubles is
// inexact), and seeds a missing counter at or above the node's clock.
func TestSlotFenceStepMatchesGo(t *testing.T) {
	ctx := context.Background()
	_, raw := serverClient(t)
	k := keyOf(defaultPrefix, "r")
	for _, n := range []int64{2, 3, 7, maxLimit} {
		for _, c := range []int64{0, 5, 1_000, 1_751_234_567_890_123, 1<<52 + 3} {
			for _, slot := range []int64{0, 1, n - 1} {
				raw.FlushAll(ctx)
				raw.Set(ctx, k+":fence", c, time.Hour)
				keys := []string{slotKey(k, int(slot)), k + ":fence"}
				got := runScript(t, raw, fenceAcquireScript, keys, "T", 60000, 60000, n, slot)
				if want := (fenceStep{n: n, slot: slot}).atLeast(c + 1); got != want {
					t.Fatalf("n %d, slot %d, counter %d: fence %d, want %d", n, slot, c, got, want)
				}
				if v, _ := raw.Get(ctx, k+":fence").Int64(); v != got {
					t.Fatalf("counter %d after fence %d", v, got)
				}
			}
		}
	}
	raw.FlushAll(ctx)
	before := time.Now().UnixMicro()
	f := runScript(t, raw, fenceAcquireScript, []string{slotKey(k, 2), k + ":fence"}, "T", 60000, 60000, 3, 2)
	if f < before || f%3 != 2 {
		t.Fatalf("seeded fence %d: want at least the clock (%d) and 2 modulo 3", f, before)
	}
}
