package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestSuccessfulHandOverLeavesNoPredecessorKey (issue 20, finding 1): a
// hand-over round that succeeds on a majority while its call to a slow node
// waits behind a batch past its deadline (and is dropped unsent) must still
// release the predecessor's token there: Release returned nil, so no key of
// that token may outlive one more round. Early (unfenced, 3 nodes) and
// waiting (fenced, 5 nodes: a fence needs 4 carriers) hand-overs alike.
func TestSuccessfulHandOverLeavesNoPredecessorKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		opts  []LockOption
	}{
		{"early", 3, nil},
		{"waiting", 5, []LockOption{WithFencing()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, mems := memClient(t, tc.nodes, WithNodeTimeout(50*time.Millisecond))
				holder, err := c.Acquire(context.Background(), "r", time.Minute, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				next := waitFor(context.Background(), c, "r", time.Minute, tc.opts...)
				synctest.Wait()
				mems[0].set(func(m *memNode) { m.delay = 100 * time.Millisecond })
				// Node 0's worker is busy for 100ms with another resource's
				// call: the hand-over's call to it waits past its deadline.
				go func() { _, _ = c.TryAcquire(context.Background(), "other", time.Second) }()
				time.Sleep(time.Millisecond)
				if err := holder.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				got := <-next
				if got.err != nil {
					t.Fatal(got.err)
				}
				time.Sleep(500 * time.Millisecond) // node 0 has run everything queued
				if n := holders(c, mems, "r", holder.Token()); n > 0 {
					t.Fatalf("the released predecessor's token (TTL 1m) is still on %d node(s)", n)
				}
				if n := holders(c, mems, "r", got.l.Token()); n < c.q {
					t.Fatalf("the successor's token is on %d nodes, want a quorum", n)
				}
				if err := got.l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
				k := c.keysFor("r")
				for i, m := range mems {
					if v, ok := m.get(k.key); ok {
						t.Errorf("node %d still holds %q after both locks were released", i, v)
					}
				}
			})
		})
	}
}
