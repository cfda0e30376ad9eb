package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// total counts the calls of s, whatever their arguments.
func (sc *scriptCounter) total(s *transport.Script) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.calls[s])
}

// slotArrival is which waiter got a slot, and how.
type slotArrival struct {
	i int
	acquired
}

// queuedSlotWaiters has waiters 0..2, each a Client of its own (as of its
// own process), wait in that order for resource "r" WithLimit(2), whose
// slots the caller holds, on the servers raws. Waiters 0 and 1 retry only
// after an hour: only an announcement wakes them; waiter 2, the last to
// come, retries every 20ms. Each has made its rounds and paused before the
// next comes. With queue false, the clients' slot waiters do not queue on
// the nodes (noSlotQueue).
func queuedSlotWaiters(t *testing.T, ctx context.Context, raws []*redis.Client, queue bool) <-chan slotArrival {
	t.Helper()
	arrivals := make(chan slotArrival, 3)
	for i := range 3 {
		retry := time.Hour
		if i == 2 {
			retry = 20 * time.Millisecond
		}
		sc := &scriptCounter{}
		c := wrappedClient(t, raws, sc.wrap, WithRetryDelay(retry, retry))
		c.cfg.noSlotQueue = !queue
		w := waitFor(ctx, c, "r", time.Minute, WithLimit(2))
		go func() { arrivals <- slotArrival{i, <-w} }()
		// Its first round (both slots, plain), then its second, after
		// it subscribed: queued (slot_wait.lua) or, without the queue,
		// plain again. Counted once every node answered.
		eventually(t, func() bool {
			if queue {
				return sc.total(slotWaitScript) >= 2*len(raws)
			}
			return sc.total(nil) >= 4*len(raws) // plain SET NX rounds
		})
	}
	return arrivals
}

// TestLimitWaitersOfClientsAreServedInArrivalOrder: three waiters of three
// clients queue on the nodes for a full resource of 2 slots; slots
// released one by one go to them in arrival order, though the last one
// retries every 20ms and the others only when a release is announced to
// them (the control below shows that order fails without the queue).
func TestLimitWaitersOfClientsAreServedInArrivalOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raws := servers(t, 3)
	holder := wrappedClient(t, raws, nil)
	held := holdSlots(t, holder, 2)
	arrivals := queuedSlotWaiters(t, ctx, raws, true)
	for want := range 3 {
		if err := held[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-arrivals
		if got.err != nil || got.i != want {
			t.Fatalf("waiter %d got a slot (%v); waiter %d came first", got.i, got.err, want)
		}
		held = append(held[1:], got.l)
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}

// TestLimitWithoutTheQueueTheLastWaiterGoesFirst is the control of
// TestLimitWaitersOfClientsAreServedInArrivalOrder: with the same waiters
// not queued on the nodes, the first freed slot goes to the last waiter,
// the one that polls.
func TestLimitWithoutTheQueueTheLastWaiterGoesFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raws := servers(t, 3)
	holder := wrappedClient(t, raws, nil)
	held := holdSlots(t, holder, 2)
	arrivals := queuedSlotWaiters(t, ctx, raws, false)
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-arrivals
	if got.err != nil || got.i != 2 {
		t.Fatalf("waiter %d got the slot first (%v), want the polling waiter 2: the control no longer shows a barge", got.i, got.err)
	}
	_ = got.l.Release(ctx)
	cancel() // the others wait for an hour
}

// holdSlots takes the n slots of resource "r" WithLimit(n) with c.
func holdSlots(t *testing.T, c *Client, n int) []*Lock {
	t.Helper()
	var held []*Lock
	for range n {
		l, err := c.TryAcquire(context.Background(), "r", time.Minute, WithLimit(n))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}

// evalSlot runs one of the slot queue's scripts on raw as the client sends
// it, for resource "r" of 2 slots; nil for a refusal.
func evalSlot(t *testing.T, raw *redis.Client, c *Client, s *transport.Script, argv ...any) any {
	t.Helper()
	args := scriptArgs(s, c.slotKeys("r", 0).slotQueueKeys(2), argv...)
	args[0], args[1] = "eval", s.Src
	v, err := raw.Do(context.Background(), args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLimitReservedSlotRefusesNewcomersAndPassesOn: with waiters queued
// (W1 before W2), a released slot is reserved: TryAcquire is refused, and
// so is the later waiter; when W1 gives up, W2 takes the slot, and when
// the last waiter gives up a reservation is freed at once, not after its
// lease.
func TestLimitReservedSlotRefusesNewcomersAndPassesOn(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	held := holdSlots(t, c, 2)
	mark, ch := 2, c.keysFor("r").channel
	wait := func(id string, ticket, slot int) any {
		return evalSlot(t, raw, c, slotWaitScript, "T"+id, 60000, 60000, mark, "0", 2, slot, ticket, id, 60000, ch)
	}
	for i, id := range []string{"W1", "W2"} {
		if v := wait(id, i+1, 0); v != nil {
			t.Fatalf("%s took a held slot: %v", id, v)
		}
	}
	s := held[0].Slot()
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := raw.Get(ctx, slotKey(c.keysFor("r").key, s)).Result(); !strings.HasPrefix(v, reservePrefix) {
		t.Fatalf("released slot %d holds %q while waiters are queued, want a reservation", s, v)
	}
	if l, err := c.TryAcquire(ctx, "r", time.Minute, WithLimit(2)); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryAcquire took a reserved slot: %v, %v", l, err)
	}
	if v := wait("W2", 2, s); v != nil {
		t.Fatalf("W2 took the slot reserved while W1 waits ahead of it: %v", v)
	}
	evalSlot(t, raw, c, slotLeaveScript, "W1", mark, ch) // W1 gives up
	if l, err := c.TryAcquire(ctx, "r", time.Minute, WithLimit(2)); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryAcquire took the slot W1 passed on to W2: %v, %v", l, err)
	}
	if v := wait("W2", 2, s); v == nil {
		t.Fatal("W2, now the queue's head, was refused the reserved slot")
	}
	// The last waiter gives up: its reservation is freed at once.
	if v := wait("W3", 3, 0); v != nil {
		t.Fatalf("W3 took a held slot: %v", v)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	evalSlot(t, raw, c, slotLeaveScript, "W3", mark, ch)
	l, err := c.TryAcquire(ctx, "r", time.Minute, WithLimit(2))
	if err != nil {
		t.Fatalf("the slot reserved for a waiter that gave up is still refused: %v", err)
	}
	if l.Slot() != held[1].Slot() {
		t.Fatalf("got slot %d, want the freed %d", l.Slot(), held[1].Slot())
	}
	if n, _ := raw.Exists(ctx, c.keysFor("r").key+":q", c.keysFor("r").key+":qx").Result(); n != 0 {
		t.Fatalf("%d queue keys left with nobody queued", n)
	}
}
