package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// TestReusedRoundsCarryNoLateReplies: an acquisition decided by the fast
// nodes returns its round while two slow nodes still answer; once they
// have, the round is reused. Each Inspect that follows must see every node
// hold the new lock's token, not a late "OK" of an earlier round. Rounds
// are pooled (sync.Pool drops some under -race, so over many iterations).
func TestReusedRoundsCarryNoLateReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 5)
		for _, m := range mems[3:] {
			m.set(func(m *memNode) { m.delay = 10 * time.Millisecond })
		}
		ctx := context.Background()
		reused := 0
		for i := range 40 {
			l, err := c.TryAcquire(ctx, "res", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // the slow nodes answer; the round is pooled
			states, err := c.Inspect(ctx, "res")
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range states {
				if st.Token != l.Token() || st.Err != nil {
					t.Fatalf("iteration %d: node %d seen as %+v, want token %s", i, st.Node, st, l.Token())
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			if p, _ := c.rounds.Get().(*round); p != nil {
				reused++
				c.rounds.Put(p)
			}
		}
		if reused == 0 {
			t.Fatal("no round was ever pooled: the test saw no reuse")
		}
	})
}

// TestAllNodesMask: the mask of every node, up to the 64 a Client takes.
func TestAllNodesMask(t *testing.T) {
	for n, want := range map[int]uint64{1: 1, 3: 7, 63: 1<<63 - 1, 64: ^uint64(0)} {
		c := &Client{nodes: make([]*transport.Node, n)}
		if got := c.allNodes(); got != want {
			t.Errorf("allNodes() with %d nodes = %#x, want %#x", n, got, want)
		}
	}
}

// TestClassifiers: how a node's reply counts in a round.
func TestClassifiers(t *testing.T) {
	fail := errors.New("connection reset")
	for _, tc := range []struct {
		name     string
		classify func(transport.Reply) outcome
		rep      transport.Reply
		want     outcome
	}{
		{"answered: a value", classifyAnswered, transport.Reply{Val: "x"}, outOK},
		{"answered: nil", classifyAnswered, transport.Reply{Err: redis.Nil}, outFailed},
		{"set: OK", classifySet, transport.Reply{Val: "OK"}, outOK},
		{"set: nil", classifySet, transport.Reply{Err: redis.Nil}, outRefused},
		{"set: an error", classifySet, transport.Reply{Err: fail}, outFailed},
		{"one: 1", classifyOne, transport.Reply{Val: int64(1)}, outOK},
		{"one: 0", classifyOne, transport.Reply{Val: int64(0)}, outRefused},
		{"one: not a number", classifyOne, transport.Reply{Val: "1"}, outRefused},
		{"one: an error", classifyOne, transport.Reply{Val: int64(1), Err: fail}, outFailed},
	} {
		if got := tc.classify(tc.rep); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
