package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// memClientOn builds another Client over the same in-memory nodes, as a
// second process would be.
func memClientOn(t testing.TB, mems []*memNode, opts ...Option) *Client {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	nodes := make([]*transport.Node, len(mems))
	for i, m := range mems {
		nodes[i] = transport.NewNode(i, fmt.Sprintf("mem%d", i), nil, transportEnv)
		nodes[i].Do = m.do
	}
	c := start(cfg, nodes, nil)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor starts Acquire in the background; the result arrives on the
// returned channel.
func waitFor(ctx context.Context, c *Client, resource string, ttl time.Duration, opts ...LockOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, resource, ttl, opts...)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

type acquired struct {
	l   *Lock
	err error
	at  time.Time
}

func counts(mems []*memNode, op string) (n int) {
	for _, m := range mems {
		n += m.count(op)
	}
	return n
}

// holderAndWaiter sets up a hand-over on slow in-memory nodes (5ms a
// batch): a holder with holderTTL and a local waiter queued behind it for
// waiterTTL.
func holderAndWaiter(t *testing.T, holderTTL, waiterTTL time.Duration) (*Client, []*memNode, *Lock, <-chan acquired) {
	t.Helper()
	c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
	for _, m := range mems {
		m.delay = 5 * time.Millisecond
	}
	holder, err := c.Acquire(context.Background(), "hot", holderTTL)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(context.Background(), c, "hot", waiterTTL)
	synctest.Wait()
	return c, mems, holder, next
}

// TestLocalHandOverIsOneRound: a Release with a local waiter passes the
// lock in one round on the nodes (no release round, no acquire round), and
// without fencing the waiter starts at once, before the round returns.
func TestLocalHandOverIsOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems, holder, next := holderAndWaiter(t, time.Second, time.Second)
		turns, sets, releases := counts(mems, "turn"), counts(mems, "set"), counts(mems, "release")
		released := time.Now()
		if err := holder.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		if !got.at.Equal(released) {
			t.Fatalf("successor started %v after the release, want at once", got.at.Sub(released))
		}
		time.Sleep(100 * time.Millisecond) // every node has answered
		if d := counts(mems, "turn") - turns; d != 3 {
			t.Fatalf("%d hand-over calls, want one round on 3 nodes", d)
		}
		if counts(mems, "set") != sets || counts(mems, "release") != releases {
			t.Fatal("the hand-over sent a release or acquire round")
		}
		if got.l.Token() == holder.Token() {
			t.Fatal("successor kept the predecessor's token")
		}
		if n := holders(c, mems, "hot", got.l.Token()); n != 3 {
			t.Fatalf("successor's token on %d nodes, want 3", n)
		}
		// Confirmed: its validity now counts from the hand-over round.
		if want := released.Add(time.Second - driftAllowance(time.Second, defaultDriftFactor)); !got.l.Until().Equal(want) {
			t.Fatalf("successor valid until +%v, want +%v", got.l.Until().Sub(released), want.Sub(released))
		}
		if err := holder.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release of the predecessor: %v, want ErrNotHeld", err)
		}
		if err := got.l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFencedHandOversGrowTheFence: with WithFencing, each successor waits
// for the round and gets a strictly larger fence than its predecessor.
func TestFencedHandOversGrowTheFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		l, err := c.Acquire(context.Background(), "inv", time.Second, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		var waits []<-chan acquired
		for range 4 {
			waits = append(waits, waitFor(context.Background(), c, "inv", time.Second, WithFencing()))
			synctest.Wait()
		}
		sets := counts(mems, "set")
		for i, w := range waits {
			time.Sleep(10 * time.Millisecond)
			if err := l.Release(context.Background()); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			got := <-w
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.l.Fence() <= l.Fence() {
				t.Fatalf("hand-over %d: fence %d after %d, want larger", i, got.l.Fence(), l.Fence())
			}
			l = got.l
		}
		if counts(mems, "set") != sets {
			t.Fatal("a successor acquired by itself instead of by hand-over")
		}
		_ = l.Release(context.Background())
	})
}

// TestHandOverFallsBack: when the hand-over round cannot reach a quorum,
// a fenced (waiting) successor acquires by itself once the nodes are back,
// and an unfenced successor that already started keeps the validity it was
// given, and is told it lost the lock when it cannot extend it.
func TestHandOverFallsBack(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprintf("fencing=%v", fenced), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testHandOverFallsBack(t, fenced) })
		})
	}
}

func testHandOverFallsBack(t *testing.T, fenced bool) {
	var mu sync.Mutex
	var handErrs []error
	obs := func(err error) {
		mu.Lock()
		handErrs = append(handErrs, err)
		mu.Unlock()
	}
	c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond), WithRetryDelay(10*time.Millisecond, 20*time.Millisecond), withHandOverHook(obs))
	var opts []LockOption
	if fenced {
		opts = append(opts, WithFencing())
	}
	holder, err := c.Acquire(context.Background(), "r", time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(context.Background(), c, "r", time.Second, opts...)
	synctest.Wait()
	for _, m := range mems[:2] {
		m.set(func(m *memNode) { m.err = errMemDown })
	}
	if err := holder.Release(context.Background()); !errors.Is(err, ErrQuorum) {
		t.Fatalf("Release with 2 of 3 nodes down: %v, want ErrQuorum", err)
	}
	mu.Lock()
	if len(handErrs) != 1 || handErrs[0] == nil {
		t.Fatalf("hand-over events %v, want one failure", handErrs)
	}
	mu.Unlock()
	if !fenced {
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		// It may be running already: it keeps the validity it was given,
		// and, unable to extend it, is told of the loss before it ends.
		select {
		case <-got.l.Lost():
			t.Fatal("a successor that started was declared lost before its validity ended")
		default:
		}
		ctx, stop := got.l.KeepAlive(context.Background())
		defer stop()
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		if time.Now().After(got.l.Until()) {
			t.Fatal("loss signalled after Until")
		}
		return
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case got := <-next:
		t.Fatalf("successor returned while the nodes were down: %v", got.err)
	default:
	}
	for _, m := range mems[:2] {
		m.set(func(m *memNode) { m.err = nil })
	}
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.l.Fence() <= holder.Fence() {
		t.Fatalf("fence %d after %d", got.l.Fence(), holder.Fence())
	}
	_ = got.l.Release(context.Background())
}

// TestSuccessorGivingUpMidHandOver: a waiter whose context ends while the
// lock is being handed to it does not strand the resource: the lock moves on
// to the next waiter at once, not after a TTL.
func TestSuccessorGivingUpMidHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(50*time.Millisecond))
		holder, err := c.Acquire(context.Background(), "r", time.Minute, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		quitter := waitFor(ctx, c, "r", time.Minute, WithFencing())
		synctest.Wait()
		third := waitFor(context.Background(), c, "r", time.Minute, WithFencing())
		synctest.Wait()
		for _, m := range mems {
			m.delay = 10 * time.Millisecond
		}
		released := make(chan error, 1)
		go func() { released <- holder.Release(context.Background()) }()
		time.Sleep(5 * time.Millisecond) // the round is on the wire
		cancel()
		if got := <-quitter; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("quitter: %v, want context.Canceled", got.err)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := <-third
		if got.err != nil {
			t.Fatal(got.err)
		}
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("next waiter waited %v: the quitter's lock was stranded", waited)
		}
		if got.l.Fence() <= holder.Fence()+1 {
			t.Fatalf("fence %d: the quitter's hand-over (fence > %d) was not released first", got.l.Fence(), holder.Fence())
		}
		_ = got.l.Release(context.Background())
	})
}

// TestHandedLockKeepsItsSafeguards: a lock received by hand-over extends
// through KeepAlive and signals its loss.
func TestHandedLockKeepsItsSafeguards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		holder, err := c.Acquire(context.Background(), "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		next := waitFor(context.Background(), c, "job", ttl)
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		_ = holder.Release(context.Background())
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		ctx, stop := got.l.KeepAlive(context.Background())
		time.Sleep(2 * time.Second) // many TTLs
		if ctx.Err() != nil || !time.Now().Before(got.l.Until()) {
			t.Fatalf("handed lock not kept alive: %v, until %v", context.Cause(ctx), got.l.Until())
		}
		stop()
		_ = got.l.Release(context.Background())

		// Another hand-over, then the majority goes: the successor's
		// keep-alive context ends with ErrLockLost before its validity.
		holder, err = c.Acquire(context.Background(), "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		next = waitFor(context.Background(), c, "job", ttl)
		synctest.Wait()
		_ = holder.Release(context.Background())
		got = <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		ctx, stop = got.l.KeepAlive(context.Background())
		defer stop()
		time.Sleep(3 * ttl)
		if ctx.Err() != nil {
			t.Fatalf("handed lock not kept alive: %v", context.Cause(ctx))
		}
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { m.err = errMemDown })
		}
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		if time.Now().After(got.l.Until()) {
			t.Fatal("loss signalled after Until")
		}
	})
}

// TestWaitersOfDifferentClientsAreServedInOrder: waiters of separate
// Clients (processes) get a released lock in the order they started
// waiting, whatever their retry timers do, and a TryAcquire arriving between
// a release and the next waiter's attempt does not take the lock.
func TestWaitersOfDifferentClientsAreServedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []Option{WithNodeTimeout(20 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
		a, mems := memClient(t, 3, opts...)
		l, err := a.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const n = 4
		var waits []<-chan acquired
		for range n {
			waits = append(waits, waitFor(context.Background(), memClientOn(t, mems, opts...), "r", time.Minute))
			time.Sleep(time.Millisecond) // a distinct ticket each
			synctest.Wait()
		}
		time.Sleep(200 * time.Millisecond) // every waiter has retried a few times
		newcomer := memClientOn(t, mems, opts...)
		for i, w := range waits {
			if err := l.Release(context.Background()); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			if _, err := newcomer.TryAcquire(context.Background(), "r", time.Minute); !errors.Is(err, ErrLocked) {
				t.Fatalf("TryAcquire right after release %d: %v, want ErrLocked (reserved for the next waiter)", i, err)
			}
			got := <-w
			if got.err != nil {
				t.Fatalf("waiter %d: %v", i, got.err)
			}
			for j, other := range waits[i+1:] {
				select {
				case o := <-other:
					t.Fatalf("waiter %d got the lock before waiter %d (err %v)", i+1+j, i, o.err)
				default:
				}
			}
			l = got.l
		}
		_ = l.Release(context.Background())
	})
}

// TestDeadWaiterHoldsOthersBackOnlyForItsLease: a waiter of another process
// that stops renewing its place (crashed) delays the next waiter by at most
// the queue lease.
func TestDeadWaiterHoldsOthersBackOnlyForItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []Option{WithNodeTimeout(20 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
		a, mems := memClient(t, 3, opts...)
		l, err := a.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		dead := memClientOn(t, mems, opts...)
		deadWait := waitFor(context.Background(), dead, "r", time.Minute)
		time.Sleep(10 * time.Millisecond)
		live := waitFor(context.Background(), memClientOn(t, mems, opts...), "r", time.Minute)
		time.Sleep(100 * time.Millisecond)
		_ = dead.Close() // stops retrying without leaving the queue
		if got := <-deadWait; !errors.Is(got.err, errClosed) {
			t.Fatalf("closed waiter: %v", got.err)
		}
		released := time.Now()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := <-live
		if got.err != nil {
			t.Fatal(got.err)
		}
		if waited, lease := time.Since(released), a.queueLease(); waited > lease+100*time.Millisecond {
			t.Fatalf("live waiter waited %v after the release, want at most the lease %v and a retry", waited, lease)
		}
		_ = got.l.Release(context.Background())
	})
}

// TestHandOverToAShorterTTL: the keys take the successor's TTL, so its
// validity never counts on the predecessor's longer one, not even before
// the round confirms.
func TestHandOverToAShorterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, holder, next := holderAndWaiter(t, time.Minute, time.Second)
		released := time.Now()
		go func() { _ = holder.Release(context.Background()) }()
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		limit := released.Add(time.Second - driftAllowance(time.Second, defaultDriftFactor))
		if u := got.l.Until(); u.After(limit) {
			t.Fatalf("successor valid for %v before the round confirmed, past its own 1s TTL", u.Sub(released))
		}
		time.Sleep(100 * time.Millisecond)
		if u := got.l.Until(); !u.Equal(limit) {
			t.Fatalf("successor valid for %v after the round, want %v", u.Sub(released), limit.Sub(released))
		}
		_ = got.l.Release(context.Background())
	})
}

// TestReleaseWithCancelledContextAroundHandOver: a Release given an
// already cancelled context still releases (without handing over: the
// waiter acquires by itself), and a handed lock released that way frees the
// nodes too.
func TestReleaseWithCancelledContextAroundHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		done, cancel := context.WithCancel(context.Background())
		cancel()
		holder, err := c.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		next := waitFor(context.Background(), c, "r", time.Minute)
		synctest.Wait()
		turns, sets := counts(mems, "turn"), counts(mems, "set")
		_ = holder.Release(done)
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		synctest.Wait()
		// The waiter's own round meets a free key: a plain SET, no turn.
		if counts(mems, "release") == 0 || counts(mems, "set") != sets+3 || counts(mems, "turn") != turns {
			t.Fatal("want a release round and the waiter's own acquire round, not a hand-over")
		}
		third := waitFor(context.Background(), c, "r", time.Minute)
		synctest.Wait()
		_ = got.l.Release(context.Background()) // hands over to the third
		l3 := <-third
		if l3.err != nil {
			t.Fatal(l3.err)
		}
		_ = l3.l.Release(done)
		time.Sleep(100 * time.Millisecond)
		if n := holders(c, mems, "r", l3.l.Token()); n != 0 {
			t.Fatalf("a handed lock released with a cancelled context is still on %d nodes", n)
		}
	})
}

// TestRemoteWaiterIsPassedOverAtMostMaxJumps: local hand-overs may pass
// ahead of a waiter of another process (they cost one round the successor
// does not wait for), but at most maxJumps in a row; the next release goes
// to the nodes' queue, whose head then gets the lock even though local
// waiters remain.
func TestRemoteWaiterIsPassedOverAtMostMaxJumps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testPassedOver(t, time.Millisecond, maxJumps) })
}

// TestRemoteWaiterIsPassedOverOnceBehindLongHolds: with holds longer than
// maxJumpSpan, the remote waiter is passed over once only.
func TestRemoteWaiterIsPassedOverOnceBehindLongHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testPassedOver(t, maxJumpSpan, 1) })
}

// testPassedOver releases a chain of local holders, each held for hold,
// with a waiter of another client queued first; the remote waiter must get
// the lock after exactly want local hand-overs.
func testPassedOver(t *testing.T, hold time.Duration, want int) {
	opts := []Option{WithNodeTimeout(20 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
	a, mems := memClient(t, 3, opts...)
	l, err := a.Acquire(context.Background(), "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	remote := waitFor(context.Background(), memClientOn(t, mems, opts...), "r", time.Minute)
	time.Sleep(200 * time.Millisecond) // queued on the nodes, retried a few times
	var local []<-chan acquired
	for range maxJumps + 2 {
		local = append(local, waitFor(context.Background(), a, "r", time.Minute))
		time.Sleep(time.Millisecond)
		synctest.Wait()
	}
	for i := 0; ; i++ {
		time.Sleep(hold)
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		synctest.Wait() // the round has answered, the next holder has its lock
		select {
		case got := <-remote:
			if got.err != nil {
				t.Fatalf("remote waiter: %v", got.err)
			}
			if i != want {
				t.Fatalf("remote waiter served after %d local hand-overs, want %d", i, want)
			}
			_ = got.l.Release(context.Background())
			return
		case got := <-local[i]:
			if got.err != nil {
				t.Fatalf("local waiter %d: %v", i, got.err)
			}
			if i >= want {
				t.Fatalf("local waiter %d served ahead of the remote waiter after %d jumps", i, want)
			}
			l = got.l
		}
	}
}

// TestHandOverWaitsForItsPredecessorsRound: a lock handed over early whose
// round is still out when it is released waits for that round (at most a
// node timeout) and then passes locally too, rather than through the
// nodes' queue to a waiter of another process: a hot lock held briefly
// stays in one process although its rounds are slower than its holds.
func TestHandOverWaitsForItsPredecessorsRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []Option{WithNodeTimeout(50 * time.Millisecond), WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
		a, mems := memClient(t, 3, opts...)
		l, err := a.Acquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		remote := waitFor(context.Background(), memClientOn(t, mems, opts...), "r", time.Minute)
		time.Sleep(100 * time.Millisecond) // queued on the nodes
		first := waitFor(context.Background(), a, "r", time.Minute)
		time.Sleep(time.Millisecond)
		second := waitFor(context.Background(), a, "r", time.Minute)
		synctest.Wait()
		for _, m := range mems {
			m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
		}
		go func() { _ = l.Release(context.Background()) }()
		got := <-first // early: before its round answers
		if got.err != nil {
			t.Fatal(got.err)
		}
		time.Sleep(time.Millisecond) // a 1ms hold, well inside the 10ms round
		go func() { _ = got.l.Release(context.Background()) }()
		select {
		case next := <-second:
			if next.err != nil {
				t.Fatal(next.err)
			}
			_ = next.l.Release(context.Background())
		case r := <-remote:
			t.Fatalf("the lock went to the other process's waiter (err %v) while a local waiter was queued", r.err)
		}
	})
}
