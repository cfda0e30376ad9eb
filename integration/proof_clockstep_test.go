package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// TestProofNodeClockStep: Redis expires keys by its wall clock, so a node
// whose clock steps forward drops a lock key early. A holds a lock (TTL 30s)
// on all 5 nodes and reads a register; the wall clocks of k nodes then step
// 60s forward (libfaketime), and B tries to lock the resource for 3s. With a
// minority stepped (k = 2) A's keys survive on a majority and B is kept out;
// with a majority stepped (k = 3, a control that breaks the bounded-drift
// assumption) B gets the lock while A still holds it, and the checker finds
// the overlap and the lost update.
func TestProofNodeClockStep(t *testing.T) {
	for _, k := range []int{2, 3} {
		name := "minority"
		if k == 3 {
			name = "majority-control"
		}
		t.Run(name, func(t *testing.T) { clockStep(t, k) })
	}
}

// clockStep runs the scenario with k of 5 node clocks stepped and records its
// row.
func clockStep(t *testing.T, k int) {
	const res, ttl, step = "r", 30 * time.Second, 60 * time.Second
	c := redistest.StartClockCluster(t, 5)
	store := redistest.StartNode(t).Client(t)
	// Not a timing test: generous node timeouts.
	a := lockClient(t, c, redlock.WithNodeTimeout(time.Second))
	b := lockClient(t, c, redlock.WithNodeTimeout(time.Second))
	ctx := within(t, time.Minute)
	reg := "register:" + res
	get := func() string {
		v, err := store.Get(ctx, reg).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	var h checker.History
	la := holdOnAllNodes(t, a, res, ttl) // the scenario: A's key on all 5 nodes
	secA := checker.Section{Resource: res, Holder: "A", Start: stamp(), Read: get()}
	for _, n := range c.Nodes[:k] {
		if err := n.SetClockOffset(step); err != nil {
			t.Fatal(err)
		}
	}
	h.Events = append(h.Events, checker.Event{At: stamp(), What: fmt.Sprintf("clocks of nodes 1-%d stepped %.0fs forward", k, step.Seconds())})
	checkOffsets(t, ctx, a, k, step)
	kept := keysLeft(t, ctx, a, res, la.Token(), 5-k)

	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lb, berr := b.Acquire(bctx, res, ttl)
	if berr == nil {
		secB := checker.Section{Resource: res, Holder: "B", Start: stamp(), Read: get()}
		if err := store.Set(ctx, reg, "B/1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		secB.Wrote, secB.End = "B/1", stamp()
		_ = lb.Release(ctx)
		h.Sections = append(h.Sections, secB)
	}
	if err := store.Set(ctx, reg, "A/1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	secA.Wrote, secA.End = "A/1", stamp()
	aerr := la.Release(ctx)
	h.Sections = append(h.Sections, secA)
	h.Final = map[string]string{res: get()}
	r := checker.Check(h)
	notes := fmt.Sprintf("%s; A's key left on %d of 5 nodes after the step; B's attempt for 3s: %v; A's release: %v", r, kept, errText(berr), errText(aerr))
	report.Add(Row{
		Scenario: "clock step: 2 clients, 1 resource, ttl 30s, 5 nodes",
		Fault:    fmt.Sprintf("wall clocks of %d of 5 nodes stepped %.0fs forward while A holds", k, step.Seconds()),
		Ops:      r.Writes, Violations: r.Safety(), Lost: r.Lost, Duplicated: r.Duplicated,
		Control: k >= 3,
		Notes:   notes,
	})
	switch {
	case k < 3 && (berr == nil || !r.OK()):
		t.Fatalf("a minority clock step let B in: %s; evidence in %s", notes, keepEvidence(t, h, r))
	case k < 3 && !errors.Is(berr, redlock.ErrLocked):
		t.Fatalf("B: %v, want its deadline wrapping ErrLocked", berr)
	case k >= 3 && (r.Overlaps == 0 || r.Lost == 0):
		t.Fatalf("checker missed the violation of a majority clock step: %s; evidence in %s", notes, keepEvidence(t, h, r))
	}
	t.Log(notes)
}

// errText is err's message, or "ok".
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// checkOffsets asserts that Client.Check sees the first k nodes' clocks
// step ahead and the others' not.
func checkOffsets(t *testing.T, ctx context.Context, cl *redlock.Client, k int, step time.Duration) {
	t.Helper()
	reports, err := cl.Admin().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reports {
		want := time.Duration(0)
		if i < k {
			want = step
		}
		if r.Err != nil || (r.ClockOffset-want).Abs() > time.Second {
			t.Fatalf("Check: node %d's clock offset %v (err %v), want about %v", i, r.ClockOffset, r.Err, want)
		}
	}
}

// keysLeft waits (bounded) until exactly want nodes answer Inspect holding
// token: a node under load may answer late, and Redis refreshes its cached
// clock once per event-loop turn. It fails the test if that never happens.
func keysLeft(t *testing.T, ctx context.Context, cl *redlock.Client, res, token string, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		states, err := cl.Inspect(ctx, res)
		if err != nil {
			t.Fatal(err)
		}
		kept, answered := 0, 0
		var seen []string
		for _, s := range states {
			if s.Err == nil {
				answered++
			}
			if s.Token == token {
				kept++
			}
			seen = append(seen, fmt.Sprintf("node %d: held %v ttl %v err %v", s.Node+1, s.Token == token, s.TTL, s.Err))
		}
		if kept == want && answered == len(states) {
			return kept
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the step %d of %d nodes answering hold A's key, want %d of %d (%s)", kept, answered, want, len(states), strings.Join(seen, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
