package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// scriptCounter records, per script, the calls a client's nodes ran.
// (calls[nil] holds the plain SET commands.)
type scriptCounter struct {
	mu    sync.Mutex
	calls map[*transport.Script][][]any
}

func (sc *scriptCounter) wrap(_ int, run func(context.Context, []*redis.Cmd)) func(context.Context, []*redis.Cmd) {
	return func(ctx context.Context, cmds []*redis.Cmd) {
		run(ctx, cmds)
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if sc.calls == nil {
			sc.calls = map[*transport.Script][][]any{}
		}
		for _, c := range cmds {
			if c.Args()[0] == "set" {
				sc.calls[nil] = append(sc.calls[nil], c.Args()) // a plain (slot) round
			}
			for _, s := range transportEnv.Scripts {
				if sends([]*redis.Cmd{c}, s) {
					sc.calls[s] = append(sc.calls[s], c.Args())
				}
			}
		}
	}
}

// with counts the calls of s that carried token.
func (sc *scriptCounter) with(s *transport.Script, token string) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, args := range sc.calls[s] {
		for _, a := range args {
			if a == token {
				n++
				break
			}
		}
	}
	return n
}

// parked waits until the caller holding the turn of resource's callers
// with limit n is parked between its rounds (claimable) and queued callers
// wait behind it.
func parked(t *testing.T, c *Client, resource string, n int32, queued int) {
	t.Helper()
	gateReaches(t, c, resource, n, func(g *gate) bool { return g.idle != nil && len(g.queue) == queued })
}

// gateReaches waits until cond holds of the gate of resource's callers
// with limit n, under the gates' lock.
func gateReaches(t *testing.T, c *Client, resource string, n int32, cond func(*gate) bool) {
	t.Helper()
	key := gateKey(c.keysFor(resource), n)
	eventually(t, func() bool {
		c.gates.mu.Lock()
		defer c.gates.mu.Unlock()
		g := c.gates.m[key]
		return g != nil && cond(g)
	})
}

// eventually waits until cond holds: a state to reach, not a time to meet
// (it gives up after minutes).
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for range 20000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the state was never reached")
}

// TestLimitLocalHandOverIsOneRound: with every slot held by a client and
// a caller of the same client waiting, the release of a slot hands that
// slot to the caller in one round of slot_turn.lua: no release round, no
// acquisition round, and its token on every node.
func TestLimitLocalHandOverIsOneRound(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(map[bool]string{false: "early", true: "fenced"}[fenced], func(t *testing.T) {
			testSlotHandOver(t, fenced)
		})
	}
}

func testSlotHandOver(t *testing.T, fenced bool) {
	ctx := context.Background()
	raws := servers(t, 3)
	var sc scriptCounter
	// Without retries by the clock, the parked caller stays parked until
	// the hand-over (nothing else announces a release here).
	c := wrappedClient(t, raws, sc.wrap, WithRetryDelay(time.Hour, time.Hour))
	opts := []LockOption{WithLimit(2)}
	if fenced {
		opts = append(opts, WithFencing())
	}
	a, err := c.TryAcquire(ctx, "r", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "r", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(ctx, c, "r", time.Minute, opts...)
	parked(t, c, "r", 2, 0)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	l := got.l
	if l.Slot() != a.Slot() || l.Token() == a.Token() {
		t.Fatalf("the waiter holds slot %d (token kept: %v); slot %d was released", l.Slot(), l.Token() == a.Token(), a.Slot())
	}
	if l.via != handoverLocal {
		t.Fatalf("the waiter's lock came by %q, want a local hand-over", l.via)
	}
	if fenced && (l.Fence() <= max(a.Fence(), b.Fence()) || l.Fence()%2 != int64(l.Slot())) {
		t.Fatalf("handed fence %d after %d and %d: want larger, of slot %d's class", l.Fence(), a.Fence(), b.Fence(), l.Slot())
	}
	oneRound(t, &sc, raws, c.keysFor("r").key, a, l)
	for _, h := range []*Lock{b, l} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Release answers at a majority: the third node's call may still run.
	eventually(t, func() bool {
		n := int64(0)
		for _, raw := range raws {
			n += raw.Exists(ctx, c.keysFor("r").key).Val()
		}
		return n == 0
	})
}

// oneRound checks that the hand-over of a's slot to l ran one round of
// slot_turn.lua from a's token to l's, that neither a's token was released
// nor l's acquired by another round, and that l's token is on every node.
func oneRound(t *testing.T, sc *scriptCounter, raws []*redis.Client, key string, a, l *Lock) {
	t.Helper()
	// The successor may start before the round ran (early), and Release
	// answers at a majority: wait for the three calls.
	eventually(t, func() bool { return sc.with(slotTurnScript, l.Token()) >= 3 })
	if n := sc.with(slotTurnScript, a.Token()); n != 3 {
		t.Fatalf("%d hand-over calls, want one round on 3 nodes", n)
	}
	if sc.with(slotReleaseScript, a.Token()) != 0 || sc.with(nil, l.Token()) != 0 || sc.with(fenceAcquireScript, l.Token()) != 0 {
		t.Fatal("the hand-over sent a release or an acquisition round")
	}
	for i, raw := range raws {
		if v := raw.Get(context.Background(), slotKey(key, l.Slot())).Val(); v != l.Token() {
			t.Fatalf("node %d: slot %d holds %q, want the successor's token", i, l.Slot(), v)
		}
	}
}

// TestLimitLocalWaitersAreHandedSlotsInOrder: three callers of one client
// wait for a full resource; each release hands the freed slot to the one
// that has waited longest, and never to a later one. Each freed slot is
// one of the first holders': a lock that was itself handed over carries
// its chain's jumps, and past maxJumpSpan (100ms, which a loaded machine
// takes between two of these releases) its release goes to the nodes.
func TestLimitLocalWaitersAreHandedSlotsInOrder(t *testing.T) {
	ctx := context.Background()
	c := wrappedClient(t, servers(t, 3), nil, WithRetryDelay(time.Hour, time.Hour)) // see testSlotHandOver
	const n = 3
	var held []*Lock
	for range n {
		l, err := c.TryAcquire(ctx, "r", time.Minute, WithLimit(n))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	type arrival struct {
		i int
		acquired
	}
	arrivals := make(chan arrival, n)
	for i := range n {
		// The first parks; the others queue behind it, in order.
		w := waitFor(ctx, c, "r", time.Minute, WithLimit(n))
		go func() { arrivals <- arrival{i, <-w} }()
		parked(t, c, "r", n, i)
	}
	for i, freed := range held {
		// The oldest caller tried the nodes and paused.
		parked(t, c, "r", n, n-1-i)
		if err := freed.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-arrivals
		if got.err != nil || got.i != i {
			t.Fatalf("waiter %d got the resource (%v) first; waiter %d has waited longer", got.i, got.err, i)
		}
		if got.l.Slot() != freed.Slot() || got.l.via != handoverLocal {
			t.Fatalf("waiter %d got slot %d by %q; slot %d was handed over", i, got.l.Slot(), got.l.via, freed.Slot())
		}
		defer got.l.Release(ctx)
	}
}

// TestLimitHandOversNeverExceedN: callers of two clients (one with local
// hand-overs, the other a second process) contend for a resource of 3
// slots, on three nodes: never more than 3 holders at once, never two on
// one slot; fenced, no fence given twice and each slot's fences growing. How
// many slots pass by local hand-over depends on how long rounds take here
// against the holds (TestLimitLocalHandOverIsOneRound proves that they do).
func TestLimitHandOversNeverExceedN(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(map[bool]string{false: "early", true: "fenced"}[fenced], func(t *testing.T) {
			handOversNeverExceedN(t, fenced)
		})
	}
}

func handOversNeverExceedN(t *testing.T, fenced bool) {
	raws := servers(t, 3)
	var handed atomic.Int64
	obs := withHandOverHook(func(err error) {
		if err == nil {
			handed.Add(1)
		}
	})
	// A node timeout well below the TTL: unfenced hand-overs are early.
	opts := []Option{WithRetryDelay(time.Millisecond, 10*time.Millisecond), WithNodeTimeout(time.Second)}
	clients := []*Client{wrappedClient(t, raws, nil, append(opts, obs)...), wrappedClient(t, raws, nil, opts...)}
	lopts := []LockOption{WithLimit(3)}
	if fenced {
		lopts = append(lopts, WithFencing())
	}
	const n, workers, ops = 3, 10, 150
	var inside, done atomic.Int64
	slotIn := make([]atomic.Int32, n)
	var mu sync.Mutex
	fences := map[int64]bool{}
	last := make([]int64, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			cl := clients[w/9] // nine callers on the first client, one on the other
			rng := rand.New(rand.NewPCG(uint64(w), 21))
			for done.Add(1) <= ops {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				l, err := cl.Acquire(ctx, "r", 10*time.Second, lopts...)
				cancel()
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				s := l.Slot()
				if !slotIn[s].CompareAndSwap(0, 1) {
					t.Errorf("slot %d held twice at once", s)
				}
				if in := inside.Add(1); in > n {
					t.Errorf("%d holders at once with limit %d", in, n)
				}
				mu.Lock()
				if fenced && (fences[l.Fence()] || l.Fence() <= last[s]) {
					t.Errorf("slot %d: fence %d given twice or not above %d", s, l.Fence(), last[s])
				}
				fences[l.Fence()], last[s] = true, l.Fence()
				mu.Unlock()
				time.Sleep(time.Duration(30+rng.IntN(30)) * time.Millisecond) // longer than a round: the slots fill up
				inside.Add(-1)
				slotIn[s].Store(0)
				if err := l.Release(context.Background()); err != nil && !errors.Is(err, ErrQuorum) {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d local hand-overs in %d acquisitions", handed.Load(), ops)
}

// blockedTurn makes c's slot waiters stop before their tries once block is
// set, until release is closed: the caller holding the turn is then busy
// trying (not parked) while others queue behind it.
type blockedTurn struct {
	block   atomic.Bool
	release chan struct{}
}

func (b *blockedTurn) hook() {
	if b.block.Load() {
		<-b.release
	}
}

// queuedBehindBusyTurn sets up, on c and resource "r" of 2 slots (opts),
// holders a and b, the caller w1 handed a's slot, a caller holding the turn
// and stopped before its tries (bt), and w3 queued behind it. It returns
// b, w1's lock and w3's channel.
func queuedBehindBusyTurn(t *testing.T, ctx context.Context, c *Client, bt *blockedTurn, opts []LockOption) (*Lock, *Lock, <-chan acquired) {
	t.Helper()
	a, err := c.TryAcquire(ctx, "r", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "r", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w1 := waitFor(ctx, c, "r", time.Minute, opts...)
	parked(t, c, "r", 2, 0)
	_ = waitFor(ctx, c, "r", time.Minute, opts...) // w2: holds the turn after w1
	parked(t, c, "r", 2, 1)
	bt.block.Store(true)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-w1
	if got.err != nil {
		t.Fatal(got.err)
	}
	w3 := waitFor(ctx, c, "r", time.Minute, opts...)
	key := gateKey(c.keysFor("r"), 2)
	eventually(t, func() bool { // w2 holds the turn, stopped; w3 queued behind it
		c.gates.mu.Lock()
		defer c.gates.mu.Unlock()
		g := c.gates.m[key]
		return g != nil && g.idle == nil && len(g.queue) == 1
	})
	return b, got.l, w3
}

// TestLimitQueuedCallerIsHandedASlotWhileTheTurnIsBusy: while the caller
// holding the turn is busy with its tries (not parked), a slot released by
// the client goes to the caller queued behind it, in one round of
// slot_turn.lua, as a lock of one holder passes to its next caller.
func TestLimitQueuedCallerIsHandedASlotWhileTheTurnIsBusy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raws := servers(t, 3)
	var sc scriptCounter
	bt := &blockedTurn{release: make(chan struct{})}
	c := wrappedClient(t, raws, sc.wrap, WithRetryDelay(time.Hour, time.Hour)) // see testSlotHandOver
	c.cfg.slotRound = bt.hook
	defer close(bt.release)
	b, l1, w3 := queuedBehindBusyTurn(t, ctx, c, bt, []LockOption{WithLimit(2)})
	defer l1.Release(context.Background())
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-w3
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.l.Release(context.Background())
	if got.l.Slot() != b.Slot() || got.l.via != handoverLocal {
		t.Fatalf("the queued caller got slot %d by %q; slot %d was released", got.l.Slot(), got.l.via, b.Slot())
	}
	oneRound(t, &sc, raws, c.keysFor("r").key, b, got.l)
}

// TestLimitFailedHandOverRequeuesTheQueuedCaller: a hand-over to a caller
// queued behind the turn's holder that fails (the slot's key holds another
// token on a majority) puts the caller back at the head of the queue: the
// turn stays with its holder, never two callers trying at once. Its
// control is the hand-over that succeeds (the test above).
func TestLimitFailedHandOverRequeuesTheQueuedCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raws := servers(t, 3)
	bt := &blockedTurn{release: make(chan struct{})}
	c := wrappedClient(t, raws, nil, WithRetryDelay(time.Hour, time.Hour))
	c.cfg.slotRound = bt.hook
	defer close(bt.release)
	// Fenced: the waiter gets the slot only once the round is decided.
	b, l1, w3 := queuedBehindBusyTurn(t, ctx, c, bt, []LockOption{WithLimit(2), WithFencing()})
	defer l1.Release(context.Background())
	for _, raw := range raws[:2] {
		raw.Set(ctx, slotKey(c.keysFor("r").key, b.Slot()), "OTHER", time.Minute)
	}
	_ = b.Release(ctx) // the hand-over fails: the caller is not handed the slot
	key := gateKey(c.keysFor("r"), 2)
	c.gates.mu.Lock()
	g := c.gates.m[key]
	requeued := g != nil && len(g.queue) == 1 && !g.queue[0].granted && !g.queue[0].claimed
	c.gates.mu.Unlock()
	if !requeued {
		t.Fatal("the caller of the failed hand-over is not back in the queue")
	}
	select {
	case got := <-w3:
		t.Fatalf("the queued caller returned (%v) while the turn is another's", got.err)
	case <-time.After(50 * time.Millisecond):
	}
}
