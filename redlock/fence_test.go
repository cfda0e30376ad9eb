package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestFenceGrowsAcrossShiftingQuorums acquires a resource many times with a
// different node down each time, so successive quorums are different
// subsets, while node 0 seeds counters from a clock 10s ahead and now and
// then a node loses its data: every fence must be larger than the one before.
func TestFenceGrowsAcrossShiftingQuorums(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		mems[0].set(func(m *memNode) { m.clock = 10 * time.Second })
		rng := rand.New(rand.NewPCG(1, 2))
		var last int64
		raised, losses := 0, 0
		fences := func() (n int) {
			for _, m := range mems {
				n += m.count("fence")
			}
			return n
		}
		for i := range 200 {
			down := rng.IntN(5)
			for j, m := range mems {
				m.set(func(m *memNode) { m.hang = j == down })
			}
			if i%7 == 6 {
				losses++
				mems[rng.IntN(5)].set(func(m *memNode) { clear(m.data) })
			}
			before := fences()
			l, err := c.TryAcquire(context.Background(), "sku-1", time.Second, WithFencing())
			if err != nil {
				t.Fatalf("round %d (node %d down): %v", i, down, err)
			}
			raised += fences() - before
			if l.Fence() <= last {
				t.Fatalf("round %d (node %d down, %d data losses so far): fence %d after %d", i, down, losses, l.Fence(), last)
			}
			last = l.Fence()
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * memReadTimeout) // the hung node works off its acquire and release
		}
		if raised == 0 {
			t.Fatal("counters never diverged: the test did not exercise the raise path")
		}
	})
}

// TestFencedAcquisitionNeedsCopies: a fence is issued only once N−q+2 nodes
// carry it (all 3 of 3, 3 of 4, 4 of 5). With one node fewer reachable a
// fenced acquisition is refused with ErrQuorum and undone, while an unfenced
// lock is still available.
func TestFencedAcquisitionNeedsCopies(t *testing.T) {
	for _, tc := range []struct{ n, copies int }{{3, 3}, {4, 3}, {5, 4}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, mems := memClient(t, tc.n, WithNodeTimeout(20*time.Millisecond))
				ctx := context.Background()
				if got := fenceCopies(tc.n, c.q); got != tc.copies {
					t.Fatalf("fenceCopies(%d) = %d, want %d", tc.n, got, tc.copies)
				}
				for _, m := range mems[tc.copies:] {
					m.set(func(m *memNode) { m.err = errMemDown })
				}
				l, err := c.TryAcquire(ctx, "ok", time.Second, WithFencing())
				if err != nil {
					t.Fatalf("%d of %d nodes up: %v", tc.copies, tc.n, err)
				}
				_ = l.Release(ctx)
				mems[0].set(func(m *memNode) { m.err = errMemDown })
				_, err = c.TryAcquire(ctx, "r", time.Second, WithFencing())
				// Below a quorum the round itself fails; above, the fence.
				named := tc.copies-1 < c.q || strings.Contains(err.Error(), "data loss")
				if !errors.Is(err, ErrQuorum) || !named {
					t.Fatalf("%d of %d nodes up: %v, want ErrQuorum naming the fence's copies", tc.copies-1, tc.n, err)
				}
				synctest.Wait()
				for i, m := range mems {
					if v, ok := m.get(c.keysFor("r").key); ok {
						t.Fatalf("node %d kept the refused attempt's key %q", i, v)
					}
				}
				if tc.copies-1 >= c.q {
					l, err := c.TryAcquire(ctx, "r", time.Second)
					if err != nil {
						t.Fatalf("unfenced lock with %d of %d nodes up: %v", tc.copies-1, tc.n, err)
					}
					_ = l.Release(ctx)
				}
			})
		})
	}
}

// TestFenceRestartsAboveAfterDataLoss: nodes that lost their data seed their
// counters from their clocks, above every fence handed out before.
func TestFenceRestartsAboveAfterDataLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", time.Second, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		first := l.Fence()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, m := range mems {
			m.set(func(m *memNode) { clear(m.data) })
		}
		time.Sleep(time.Millisecond)
		l2, err := c.TryAcquire(context.Background(), "r", time.Second, WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l2.Fence() <= first {
			t.Fatalf("fence %d after data loss, not above %d", l2.Fence(), first)
		}
		// Without fencing, Fence is zero.
		if err := l2.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		l3, err := c.TryAcquire(context.Background(), "r", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l3.Fence() != 0 {
			t.Fatalf("Fence() = %d without WithFencing", l3.Fence())
		}
	})
}
