package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The rule for callers of one resource with different limits
// (docs/design/REDLOCK.md, "Changing n"): slot 0 is the plain lock, a caller
// of n takes slots below n, so never more holders than the largest n in
// use, and nobody refused for the difference.

// TestLimitChangeSharesTheSlots: beside three holders WithLimit(3),
// callers WithLimit(5) take slots 3 and 4 and no more, callers
// WithLimit(2) none; each side's error when full is ErrLocked alone. Once
// the holders of 3 released, a plain caller takes slot 0 beside slots 3
// and 4.
func TestLimitChangeSharesTheSlots(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	var held []*Lock
	for range 3 {
		l, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for range 2 {
		l, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(5))
		if err != nil {
			t.Fatalf("WithLimit(5) beside 3 holders WithLimit(3): %v", err)
		}
		if l.Slot() < 3 {
			t.Fatalf("WithLimit(5) took slot %d, held by a holder WithLimit(3)", l.Slot())
		}
	}
	for _, n := range []int{5, 3, 2, 1} {
		if _, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(n)); !errors.Is(err, ErrLocked) || errors.Is(err, ErrQuorum) {
			t.Fatalf("WithLimit(%d) beside 5 holders: %v, want ErrLocked alone", n, err)
		}
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatalf("a plain caller beside slots 3 and 4: %v", err)
	}
	if got := raw.Get(ctx, c.keysFor("r").key).Val(); got != p.Token() || p.Slot() != 0 {
		t.Fatalf("the plain holder's key holds %q, slot %d; want its token in slot 0's key", got, p.Slot())
	}
}

// TestLimitChangePlainIsSlotZero: a plain holder holds slot 0, so callers
// WithLimit(3) take slots 1 and 2 beside it and a third waits; a plain
// caller beside a holder of slot 0 WithLimit(3) waits in Acquire until it
// releases, and is never refused.
func TestLimitChangePlainIsSlotZero(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t, WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
	plain, err := c.TryAcquire(ctx, "r", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int]bool{}
	for range 2 {
		l, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(3))
		if err != nil {
			t.Fatalf("WithLimit(3) beside a plain holder: %v", err)
		}
		slots[l.Slot()] = true
	}
	if !slots[1] || !slots[2] {
		t.Fatalf("WithLimit(3) beside a plain holder took slots %v, want 1 and 2", slots)
	}
	if _, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(3)); !errors.Is(err, ErrLocked) {
		t.Fatalf("a fourth caller of 3: %v, want ErrLocked", err)
	}
	if err := plain.Release(ctx); err != nil {
		t.Fatal(err)
	}
	zero, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(3))
	if err != nil || zero.Slot() != 0 {
		t.Fatalf("WithLimit(3) once the plain holder released: slot %d, %v; want slot 0", zero.Slot(), err)
	}
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := c.Acquire(actx, "r", 30*time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a plain caller beside slot 0's holder ended before it released: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := zero.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a plain caller after slot 0 was released: %v", err)
	}
}

// TestSlotRuleNeverAdmitsMoreThanTheLargestLimit: over random
// reachabilities and orders of arrival on five nodes, callers of limits 3
// and 5 (in both orders of deploy) and plain callers (slot 0) never hold
// more than the largest limit among them, never two on one slot.
func TestSlotRuleNeverAdmitsMoreThanTheLargestLimit(t *testing.T) {
	const holders, trials = 9, 30
	rng := rand.New(rand.NewPCG(38, 2))
	nodes := controlNodes(t, 5)
	for trial := range trials {
		for _, nd := range nodes {
			if err := nd.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		slots, largest := map[int]int{}, 0
		old, nw := 3, 5
		if trial%2 == 1 {
			old, nw = 5, 3
		}
		for h := range holders {
			reach := rng.Perm(5)[:3+rng.IntN(3)]
			n := old
			switch {
			case rng.IntN(8) == 0:
				n = 1
			case h >= holders/3 && rng.IntN(2) == 0:
				n = nw
			}
			if n == 1 {
				if plainHolds(t, nodes, reach, fmt.Sprint("p", h)) {
					slots[0]++
				}
				continue
			}
			if s := slotHolds(t, nodes, reach, fmt.Sprint("s", h), n); s >= 0 {
				slots[s]++
				largest = max(largest, n)
			}
		}
		total := 0
		for s, c := range slots {
			if c > 1 {
				t.Fatalf("trial %d: slot %d has %d holders with a majority", trial, s, c)
			}
			total += c
		}
		if total > max(old, nw) {
			t.Fatalf("trial %d: %d holders (largest limit %d), limits %d and %d", trial, total, largest, old, nw)
		}
	}
}

// plainHolds makes one plain acquisition (SET NX) reaching the nodes in
// reach and reports whether a majority set it.
func plainHolds(t *testing.T, nodes []*redis.Client, reach []int, token string) bool {
	t.Helper()
	k := keyOf(defaultPrefix, "r")
	ok := 0
	for _, i := range reach {
		set, err := nodes[i].SetNX(context.Background(), k, token, time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		if set {
			ok++
		}
	}
	return ok >= quorum(len(nodes))
}
