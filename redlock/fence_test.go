package redlock

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// TestFenceGrowsAcrossShiftingQuorums acquires a resource many times with a
// different pair of the five nodes down each time, so successive quorums are
// different subsets: every fence must be larger than the one before.
func TestFenceGrowsAcrossShiftingQuorums(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		rng := rand.New(rand.NewPCG(1, 2))
		var last int64
		raised := 0
		for i := range 200 {
			down := rng.Perm(5)[:2]
			for j, m := range mems {
				isDown := j == down[0] || j == down[1]
				m.set(func(m *memNode) { m.hang = isDown })
			}
			before := mems[0].count("fence") + mems[1].count("fence") + mems[2].count("fence") + mems[3].count("fence") + mems[4].count("fence")
			l, err := c.TryAcquire(context.Background(), "sku-1", time.Second, WithFencing())
			if err != nil {
				t.Fatalf("round %d (nodes %v down): %v", i, down, err)
			}
			after := mems[0].count("fence") + mems[1].count("fence") + mems[2].count("fence") + mems[3].count("fence") + mems[4].count("fence")
			raised += after - before
			if l.Fence() <= last {
				t.Fatalf("round %d: fence %d after %d", i, l.Fence(), last)
			}
			last = l.Fence()
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * memReadTimeout) // the hung nodes work off their acquire and release
		}
		if raised == 0 {
			t.Fatal("counters never diverged: the test did not exercise the raise path")
		}
	})
}

// TestFenceRestartsAboveAfterDataLoss: a node that lost its data seeds its
// counter from its clock, above every fence handed out before.
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
