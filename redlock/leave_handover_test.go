package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestLeftEarlySuccessorKeepsTheResource (issue 36), on 3 real lock nodes:
// a local waiter gets the lock by an early hand-over whose round two nodes
// refuse (their connections reset, the resend too), so that those nodes
// still hold the predecessor's token (TTL 1m) for it. Left to expire, the
// successor must keep the resource held until its validity ends: another
// client acquires only after its Until. (Freeing the predecessor's keys at
// once, as LeaveToExpire did, let the other client in about 3s early.) A try
// where the hand-over reached those nodes after all does not force the case
// and is repeated, at most 5 times.
func TestLeftEarlySuccessorKeepsTheResource(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	cl := newLocks(t, c, redlock.WithNodeTimeout(500*time.Millisecond))
	other := newLocks(t, c, redlock.WithNodeTimeout(time.Second))
	direct := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		direct[i] = redistest.Client(t, n.ServerAddr())
	}
	for try := range 5 {
		res := fmt.Sprintf("left-%d", try)
		succ, forced := earlySuccessorOnOneNode(t, c, cl, direct, res)
		if !forced {
			continue
		}
		until := succ.Until()
		if err := lockutil.LeaveToExpire(succ); err != nil {
			t.Fatal(err)
		}
		deadline := until.Add(2 * time.Minute)
		for {
			l, err := other.TryAcquire(deadlineCtx(t, time.Minute), res, 3*time.Second)
			if err != nil && !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrQuorum) {
				t.Fatal(err)
			}
			if err == nil {
				if early := time.Until(until); early > 0 {
					t.Fatalf("another client acquired %s %v before the left lock's validity ended", res, early)
				}
				_ = l.Release(context.Background())
				t.Logf("forced on try %d; the other client acquired %v after the left lock's validity ended", try+1, -time.Until(until))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still held 2m after the left lock's validity: %v", res, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Skip("the hand-over always reached the refusing nodes in 5 tries: the case was not forced")
}

// earlySuccessorOnOneNode makes a local waiter of res the holder's early
// successor while nodes 0 and 1 refuse connections, and reports whether
// the predecessor's token stayed on both of them (the case is forced); the
// successor is nil when it did not get the lock.
func earlySuccessorOnOneNode(t *testing.T, c *redistest.Cluster, cl *redlock.Client, direct []*redis.Client, res string) (*redlock.Lock, bool) {
	t.Helper()
	holder := holdEverywhere(t, cl, c, res) // TTL 1m
	next := make(chan *redlock.Lock, 1)
	go func() {
		l, err := cl.Acquire(deadlineCtx(t, time.Minute), res, 3*time.Second)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	time.Sleep(50 * time.Millisecond) // the waiter queues behind the holder
	c.Nodes[0].Refuse()
	c.Nodes[1].Refuse()
	_ = holder.Release(deadlineCtx(t, time.Minute)) // fails on nodes 0 and 1
	var succ *redlock.Lock
	select {
	case succ = <-next:
	case <-time.After(time.Second): // not handed over early: it waits for the nodes
	}
	time.Sleep(200 * time.Millisecond) // a resend meets the refusing nodes too
	c.Nodes[0].Heal()
	c.Nodes[1].Heal()
	if succ == nil {
		succ = <-next
	}
	if succ == nil {
		return nil, false
	}
	key := "asynqlock:{" + res + "}"
	kept := 0
	for _, d := range direct[:2] {
		v, err := d.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if v == holder.Token() {
			kept++
		}
	}
	if kept < 2 {
		t.Logf("%s: the predecessor's token stayed on %d of nodes 0 and 1: not forced", res, kept)
		_ = succ.Release(context.Background())
		return nil, false
	}
	return succ, true
}

// newLocks is a Client over c's nodes, closed at the test's end.
func newLocks(t *testing.T, c *redistest.Cluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	cl, err := redlock.New(c.Clients(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// deadlineCtx is a context that ends after d or with the test.
func deadlineCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// holdEverywhere acquires res for a minute on every node of c, not only a
// quorum (an acquisition returns at quorum; a SET may still be on its way),
// retrying at most 20 times.
func holdEverywhere(t *testing.T, cl *redlock.Client, c *redistest.Cluster, res string) *redlock.Lock {
	t.Helper()
	for range 20 {
		l, err := cl.Acquire(deadlineCtx(t, time.Minute), res, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		states, err := cl.Inspect(deadlineCtx(t, time.Minute), res)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range states {
			if s.Token == l.Token() {
				n++
			}
		}
		if n == len(c.Nodes) {
			return l
		}
		_ = l.Release(context.Background())
	}
	t.Fatalf("%s was never held on every node in 20 tries", res)
	return nil
}
