package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// TestLimitGivesDistinctSlotsUpToN: n TryAcquires hold the n slots, the
// next is refused with ErrLocked, and a released slot is taken again.
func TestLimitGivesDistinctSlotsUpToN(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	const n = 3
	held := map[int]*Lock{}
	for range n {
		l, err := c.TryAcquire(ctx, "tenant-1", 5*time.Second, WithLimit(n))
		if err != nil {
			t.Fatal(err)
		}
		if s := l.Slot(); s < 0 || s >= n || held[s] != nil {
			t.Fatalf("slot %d given twice or out of [0, %d)", s, n)
		}
		held[l.Slot()] = l
	}
	if _, err := c.TryAcquire(ctx, "tenant-1", 5*time.Second, WithLimit(n)); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryAcquire with all %d slots held: %v, want ErrLocked", n, err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "tenant-1", 5*time.Second, WithLimit(n))
	if err != nil || l.Slot() != 1 {
		t.Fatalf("after slot 1's release: slot %v, err %v; want slot 1", slotOf(l), err)
	}
	plain, err := c.TryAcquire(ctx, "other", 5*time.Second)
	if err != nil || plain.Slot() != 0 {
		t.Fatalf("a lock without WithLimit: slot %v, err %v; want 0", slotOf(plain), err)
	}
}

func slotOf(l *Lock) any {
	if l == nil {
		return "none"
	}
	return l.Slot()
}

// TestLimitRefusesBadN: n outside [1, maxLimit] is bad input.
func TestLimitRefusesBadN(t *testing.T) {
	c, _ := serverClient(t)
	for _, n := range []int{0, -1, maxLimit + 1} {
		if _, err := c.TryAcquire(context.Background(), "r", time.Second, WithLimit(n)); !errors.Is(err, ErrInvalid) {
			t.Errorf("TryAcquire WithLimit(%d): %v, want ErrInvalid", n, err)
		}
		if _, err := c.Acquire(context.Background(), "r", time.Second, WithLimit(n)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire WithLimit(%d): %v, want ErrInvalid", n, err)
		}
	}
}

// TestLimitOneIsThePlainLock: WithLimit(1) takes the resource's own key,
// as without the option.
func TestLimitOneIsThePlainLock(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Get(ctx, c.keysFor("r").key).Val(); got != l.Token() {
		t.Fatalf("WithLimit(1) left %q on the resource's key, want its token", got)
	}
	if _, err := c.TryAcquire(ctx, "r", 5*time.Second); !errors.Is(err, ErrLocked) {
		t.Fatalf("a plain TryAcquire beside WithLimit(1): %v, want ErrLocked", err)
	}
}

// TestLimitAcquireWaitsForAnySlot: with every slot held, Acquire gets the
// slot that frees, woken by its release.
func TestLimitAcquireWaitsForAnySlot(t *testing.T) {
	ctx := context.Background()
	c, other := serverPair(t)
	a, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, waiter := range []*Client{c, other} { // the same client, and another process
		got := make(chan *Lock, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := waiter.Acquire(wctx, "r", 30*time.Second, WithLimit(2))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(50 * time.Millisecond) // most likely waiting by now; either way it must get the freed slot
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		if l.Slot() != b.Slot() || l.Slot() == a.Slot() {
			t.Fatalf("waiter got slot %d; slot %d was freed, %d is held", l.Slot(), b.Slot(), a.Slot())
		}
		b = l
	}
}

// TestLimitFencesGrowAcrossSlots: one fencing counter per resource, whatever
// the slot.
func TestLimitFencesGrowAcrossSlots(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	var last int64
	var held []*Lock
	for i := range 6 {
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithLimit(3), WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("acquisition %d (slot %d): fence %d after %d", i, l.Slot(), l.Fence(), last)
		}
		last = l.Fence()
		held = append(held, l)
		if len(held) == 3 {
			_ = held[0].Release(ctx)
			held = held[1:]
		}
	}
}

// TestLimitInspectAndExtendPerSlot: Inspect shows each slot's holder; an
// extension extends the slot's key.
func TestLimitInspectAndExtendPerSlot(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	var locks []*Lock
	for range 2 {
		l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	states, err := c.Inspect(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	limit := max(locks[0].Slot(), locks[1].Slot()) + 1
	if len(states) != limit {
		t.Fatalf("Inspect of slots %d and %d on 1 node: %d states, want %d", locks[0].Slot(), locks[1].Slot(), len(states), limit)
	}
	for _, l := range locks {
		st := states[l.Slot()]
		if st.Slot != l.Slot() || st.Limit != limit || st.Token != l.Token() {
			t.Fatalf("slot %d: state %+v, want its token", l.Slot(), st)
		}
	}
	if err := locks[0].Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	k := c.slotKeys("r", locks[0].Slot())
	if slot := raw.PTTL(ctx, k.key).Val(); slot < 30*time.Second {
		t.Fatalf("after Extend(1m): slot TTL %v", slot)
	}
}

// serverPair returns two Clients, as of two processes, over one
// redis-server.
func serverPair(t *testing.T) (*Client, *Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	var cs [2]*Client
	for i := range cs {
		c, err := NewFromURLs([]string{srv.URL()}, WithNodeTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

// TestLimitForceReleaseFreesTheSlot: the operator's release of a slot's
// token frees that slot.
func TestLimitForceReleaseFreesTheSlot(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	a, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(2)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Admin().ForceRelease(ctx, "r", a.Token()); err != nil || n != 1 {
		t.Fatalf("force release of slot %d: %d nodes, %v", a.Slot(), n, err)
	}
	l, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(2))
	if err != nil || l.Slot() != a.Slot() {
		t.Fatalf("after the force release: slot %v, %v; want slot %d", slotOf(l), err, a.Slot())
	}
}

// TestLimitSlotKeepAliveAndLoss: a slot is kept alive like a lock, and its
// holder learns of its loss (its key gone) through KeepAlive's context.
func TestLimitSlotKeepAliveAndLoss(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	l, err := c.TryAcquire(ctx, "r", 1500*time.Millisecond, WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	work, stop := l.KeepAlive(ctx)
	defer stop()
	k := c.slotKeys("r", l.Slot()).key
	extended, prev := 0, raw.PTTL(ctx, k).Val()
	for range 1000 { // at most 20s: see two extensions of the slot's key
		time.Sleep(20 * time.Millisecond)
		ttl := raw.PTTL(ctx, k).Val()
		if ttl > prev {
			extended++
		}
		if prev = ttl; extended == 2 || work.Err() != nil {
			break
		}
	}
	if extended < 2 || work.Err() != nil {
		t.Fatalf("slot not kept alive: %d extensions seen, %v", extended, context.Cause(work))
	}
	raw.Del(ctx, k)
	select {
	case <-work.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the slot's loss was not signalled")
	}
	if !errors.Is(context.Cause(work), ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(work))
	}
}

// TestScanFindsAResourceByItsSlots: the operator's listing finds a
// resource whose slot 0 is free by its other slots.
func TestScanFindsAResourceByItsSlots(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	var held []*Lock
	for range 2 {
		l, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for _, l := range held {
		if l.Slot() == 0 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	found, errs, err := c.Admin().Scan(ctx, "")
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if len(found) == 0 || found[0] != "r" {
		t.Fatalf("Scan found %v, want r", found)
	}
}
