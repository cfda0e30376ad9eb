package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The rule for callers of one resource with different limits
// (docs/design/REDLOCK.md, "Changing n"): never more holders than the largest n
// in use, nobody refused, the change reported once.

// limitEvents records a Client's EventLimitChange events.
type limitEvents struct {
	mu  sync.Mutex
	got [][]int
}

func (e *limitEvents) observe(ev Event) {
	if ev.Kind != EventLimitChange {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev.Limits)
}

func (e *limitEvents) list() [][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// TestLimitChangeSharesTheSlots: beside three holders WithLimit(3),
// callers WithLimit(5) take slots 3 and 4 and no more, callers
// WithLimit(2) none; the change is reported once, and each side's error
// when full is ErrLocked.
func TestLimitChangeSharesTheSlots(t *testing.T) {
	ctx := context.Background()
	var ev limitEvents
	c, raw := serverClient(t, WithObserver(ev.observe))
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
		held = append(held, l)
	}
	for _, n := range []int{5, 3, 2} {
		if _, err := c.TryAcquire(ctx, "r", 30*time.Second, WithLimit(n)); !errors.Is(err, ErrLocked) || errors.Is(err, errLimitMismatch) {
			t.Fatalf("WithLimit(%d) beside 5 holders: %v, want ErrLocked alone", n, err)
		}
	}
	if got := ev.list(); len(got) != 1 || !slices.Equal(got[0], []int{3, 5}) {
		t.Fatalf("limit change events %v, want one naming [3 5]", got)
	}
	if m := raw.Get(ctx, c.keysFor("r").key).Val(); !strings.HasPrefix(m, "limit:3@") || !strings.Contains(m, ",5@") {
		t.Fatalf("mark %q, want both limits with their ends", m)
	}
	// Releasing every slot of limit 3 leaves the mark while slots of 5 are
	// held: a plain caller is still refused.
	for _, l := range held[:3] {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TryAcquire(ctx, "r", 30*time.Second); !errors.Is(err, ErrLocked) {
		t.Fatalf("a plain caller beside slots 3 and 4: %v, want ErrLocked", err)
	}
}

// TestLimitChangePlainAndSlotsTakeTurns: a plain lock and slots never
// hold the resource together; each side waits for the other (ErrLocked and
// errLimitMismatch from TryAcquire, a wait in Acquire), never refused.
func TestLimitChangePlainAndSlotsTakeTurns(t *testing.T) {
	ctx := context.Background()
	var ev limitEvents
	c, _ := serverClient(t, WithObserver(ev.observe), WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
	for _, first := range []int{1, 3} {
		res := fmt.Sprint("r", first)
		second := 4 - first // 3 after 1, 1 after 3
		a, err := c.TryAcquire(ctx, res, 30*time.Second, WithLimit(first))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, res, 30*time.Second, WithLimit(second)); !errors.Is(err, ErrLocked) {
			t.Fatalf("WithLimit(%d) beside WithLimit(%d): %v, want ErrLocked", second, first, err)
		}
		got := make(chan error, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := c.Acquire(actx, res, 30*time.Second, WithLimit(second))
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("WithLimit(%d) beside WithLimit(%d) ended before the holder released: %v", second, first, err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("WithLimit(%d) after WithLimit(%d) released: %v", second, first, err)
		}
	}
	if got := ev.list(); len(got) != 2 || !slices.Equal(got[0], []int{1, 3}) {
		t.Fatalf("limit change events %v, want one per resource naming [1 3]", got)
	}
}

// TestSlotRuleNeverAdmitsMoreThanTheLargestLimit: over random
// reachabilities and orders of arrival on five nodes, callers of limits 3
// and 5 (in both orders of deploy) and plain callers never hold more than
// the largest limit among them, never two on one slot, and plain holders
// never beside slots.
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
		slots, plain, largest := map[int]int{}, 0, 0
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
					plain++
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
		if total > max(old, nw) || (plain > 0 && total > 0) || plain > 1 {
			t.Fatalf("trial %d: %d slot holders (largest limit %d) and %d plain ones, limits %d and %d", trial, total, largest, plain, old, nw)
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

// TestSlotMarkNamesTheLimitsInUse: the mark names both limits while
// holders of both may hold slots, reports each change to the caller that
// made it, and names one limit again once the other's slots have expired.
func TestSlotMarkNamesTheLimitsInUse(t *testing.T) {
	ctx := context.Background()
	_, raw := serverClient(t)
	k := keyOf(defaultPrefix, "r")
	acquire := func(slot, n int, ttlMs int64) any {
		t.Helper()
		args := slotAcquireScript.args([]string{slotKey(k, slot), k + ":fence", k}, fmt.Sprint("T", slot), ttlMs, 60000, limitMark(n), "0", fenceClasses, slot)
		args[0], args[1] = "eval", slotAcquireScript.src
		v, err := raw.Do(ctx, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := acquire(0, 3, 150); v != int64(1) {
		t.Fatalf("first slot: %v, want 1 (no change reported)", v)
	}
	v, ok := acquire(4, 5, 60000).([]any)
	if !ok || len(v) != 2 || v[0] != int64(1) || !slices.Equal(limitsOfMark(fmt.Sprint(v[1])), []int{3, 5}) {
		t.Fatalf("slot 4 of 5 beside slot 0 of 3: %v, want {1, a mark of limits 3 and 5}", v)
	}
	if v := acquire(1, 5, 60000); v != int64(1) {
		t.Fatalf("a second slot of 5 while 3 is in use: %v, want 1 (no change)", v)
	}
	for i := 0; raw.Exists(ctx, slotKey(k, 0)).Val() == 1; i++ {
		if i == 200 {
			t.Fatal("slot 0 never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the mark's entry for 3 ended with its slot
	v, ok = acquire(2, 5, 60000).([]any)
	if !ok || fmt.Sprint(v[1]) != limitMark(5) {
		t.Fatalf("a slot of 5 once 3's slots expired: %v, want {1, %q}", v, limitMark(5))
	}
	if m := raw.Get(ctx, k).Val(); m != limitMark(5) {
		t.Fatalf("mark %q, want %q", m, limitMark(5))
	}
}
