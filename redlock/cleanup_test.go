package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// replies owns calls sent without a round: each reply goes to the channel.
type replies chan transport.Reply

func (r replies) Arrive(rep transport.Reply) { r <- rep }
func (replies) Unref()                       {}

// TestUndoIsNeverDroppedByAFullQueue: node 0 is slow and its queue fills up
// while a failed attempt's SET is on the wire to it. The undo must still
// reach node 0 after that SET, instead of being refused with the other calls
// a full queue refuses: otherwise the key stays there for the whole TTL under
// a token nobody holds.
func TestUndoIsNeverDroppedByAFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		k := c.keysFor("r")
		mems[0].set(func(m *memNode) { m.delay = 50 * time.Millisecond })
		for _, m := range mems[1:] {
			m.set(func(m *memNode) {
				m.delay = 10 * time.Millisecond
				m.data[k.key] = memEntry{val: "other", exp: time.Now().Add(time.Hour)}
			})
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.TryAcquire(context.Background(), "r", 10*time.Second)
			done <- err
		}()
		synctest.Wait() // node 0's worker is sending the SET
		sink := make(chan transport.Reply, transport.QueueLen)
		far := time.Now().Add(time.Hour)
		for range transport.QueueLen {
			c.nodes[0].Send(&transport.Call{Node: 0, Args: []any{"ping"}, Deadline: far, Owner: replies(sink), Op: "ping"}, c.closed)
		}
		if err := <-done; !errors.Is(err, ErrLocked) {
			t.Fatalf("attempt: %v, want ErrLocked", err)
		}
		time.Sleep(5 * time.Second) // node 0 works off its queue
		if v, ok := mems[0].get(k.key); ok {
			t.Fatalf("node 0 still holds the failed attempt's key %q: its undo was dropped", v)
		}
		if n := mems[0].count("release"); n != 1 {
			t.Fatalf("node 0 ran %d releases, want the one undo", n)
		}
	})
}

// TestAcquireRefusedByAFullQueueSendsNoUndo: an acquire refused before it
// was queued needs no undo on that node, so a stuck node's spill list does
// not grow with every retry.
func TestAcquireRefusedByAFullQueueSendsNoUndo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		mems[0].set(func(m *memNode) { m.delay = time.Second })
		sink := make(chan transport.Reply, transport.QueueLen+1)
		far := time.Now().Add(time.Hour)
		for range transport.QueueLen + 1 { // one in the worker, the rest queued
			c.nodes[0].Send(&transport.Call{Node: 0, Args: []any{"ping"}, Deadline: far, Owner: replies(sink), Op: "ping"}, c.closed)
			synctest.Wait()
		}
		for _, m := range mems[1:] {
			m.set(func(m *memNode) { m.err = errMemDown })
		}
		if _, err := c.TryAcquire(context.Background(), "r", time.Second); !errors.Is(err, ErrQuorum) {
			t.Fatalf("attempt: %v, want ErrQuorum", err)
		}
		time.Sleep(time.Minute) // node 0 works off its queue, and any spilled call
		if n := mems[0].count("release"); n != 0 {
			t.Fatalf("node 0 ran %d releases for an acquire that never reached its queue", n)
		}
	})
}

// TestReleaseSkipsNodesThatNeverGotTheSet: a lock won while one node's queue
// was full never set its key there, so its release does not queue (or
// spill) a call for that node: a dead node's spill list does not grow with
// every release.
func TestReleaseSkipsNodesThatNeverGotTheSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		mems[0].set(func(m *memNode) { m.delay = time.Second })
		sink := make(chan transport.Reply, transport.QueueLen+1)
		far := time.Now().Add(time.Hour)
		for range transport.QueueLen + 1 {
			c.nodes[0].Send(&transport.Call{Node: 0, Args: []any{"ping"}, Deadline: far, Owner: replies(sink), Op: "ping"}, c.closed)
			synctest.Wait()
		}
		ctx := context.Background()
		for i := range 10 {
			l, err := c.TryAcquire(ctx, "r", time.Second)
			if err != nil {
				t.Fatalf("lock %d with node 0's queue full: %v", i, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		}
		time.Sleep(time.Minute) // node 0 works off its queue, and any spilled call
		if n := mems[0].count("release"); n != 0 {
			t.Fatalf("node 0 ran %d releases for locks whose SET it never got", n)
		}
	})
}
