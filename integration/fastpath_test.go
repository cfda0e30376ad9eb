package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// commandCalls reads how many times each node ran cmd (INFO commandstats),
// straight from redis-server, past the fault proxies.
func commandCalls(t *testing.T, c *redistest.Cluster, cmd string) []int {
	t.Helper()
	out := make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		cl := redis.NewClient(redistest.ClientOptions(n.ServerAddr()))
		info, err := cl.Info(within(t, 10*time.Second), "commandstats").Result()
		_ = cl.Close()
		if err != nil {
			t.Fatalf("INFO commandstats on node %d: %v", i, err)
		}
		for line := range strings.Lines(info) {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
			if ok {
				n, _, _ := strings.Cut(rest, ",")
				out[i], _ = strconv.Atoi(n)
			}
		}
	}
	return out
}

// lockUnlock takes resource with Acquire and releases it, then waits (with
// Inspect, which each node runs after the calls sent before it) until every
// node has run what the release sent.
func lockUnlock(t *testing.T, cl *redlock.Client, resource string) {
	t.Helper()
	ctx := within(t, time.Minute)
	l, err := cl.Acquire(ctx, resource, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Inspect(ctx, resource); err != nil {
		t.Fatal(err)
	}
}

// TestUncontendedAcquireTakesTheFastPath: Acquire on a free key costs what
// Redlock costs, one SET NX PX per node and one compare-and-delete script
// for the release, counted by the nodes themselves; the waiter queue's
// scripts run only under contention (the control below), and leave no
// queue behind.
func TestUncontendedAcquireTakesTheFastPath(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cl := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	lockUnlock(t, cl, "warm-up") // connections, scripts
	sets0, evals0, pubs0 := commandCalls(t, c, "set"), commandCalls(t, c, "evalsha"), commandCalls(t, c, "publish")
	const n = 20
	for i := range n {
		lockUnlock(t, cl, "free-"+strconv.Itoa(i))
	}
	sets, evals, pubs := commandCalls(t, c, "set"), commandCalls(t, c, "evalsha"), commandCalls(t, c, "publish")
	for i := range c.Nodes {
		// Per lock: one SET, then the release and Inspect scripts; the
		// release announces nothing, since nobody queued.
		if d, e := sets[i]-sets0[i], evals[i]-evals0[i]; d != n || e != 2*n {
			t.Errorf("node %d ran %d SETs and %d scripts for %d uncontended locks, want %d and %d (release, inspect)", i, d, e, n, n, 2*n)
		}
		if p := pubs[i] - pubs0[i]; p != 0 {
			t.Errorf("node %d announced %d of %d uncontended releases, want none", i, p, n)
		}
		nc := redis.NewClient(redistest.ClientOptions(c.Nodes[i].ServerAddr()))
		queues, err := nc.Keys(within(t, 10*time.Second), "*:q*").Result()
		_ = nc.Close()
		if err != nil || len(queues) > 0 {
			t.Errorf("node %d: waiter queues %v (%v) after uncontended locks", i, queues, err)
		}
	}

	// Control: a waiter that meets a held key queues with the turn script.
	holder, err := cl.Acquire(within(t, time.Minute), "busy", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	evals0 = commandCalls(t, c, "evalsha")
	got := make(chan error, 1)
	go func() {
		l, err := other.Acquire(within(t, time.Minute), "busy", 10*time.Second)
		got <- err
		_ = l.Release(context.Background())
	}()
	// The waiter's first round is a plain SET, refused; then it queues:
	// one turn script per node.
	for deadline := time.Now().Add(30 * time.Second); sum(commandCalls(t, c, "evalsha"))-sum(evals0) < len(c.Nodes); {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never ran the turn script: the counts cannot see the queue")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pubs0 = commandCalls(t, c, "publish")
	if err := holder.Release(within(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Control: the release with a waiter queued announces it on every node
	// that ran it (the waiter's retry delay alone would also wake it).
	if p := sum(commandCalls(t, c, "publish")) - sum(pubs0); p < len(c.Nodes)/2+1 {
		t.Errorf("the release with a waiter queued was announced on %d nodes, want at least a quorum", p)
	}
}

func sum(xs []int) (s int) {
	for _, x := range xs {
		s += x
	}
	return s
}

// TestAcquireQueuesAtOnceWhereItWaits: a client that already waits for a
// resource (it watches its release channel) sends a new Acquire of it
// straight to the nodes' queue, without the SET NX round a held key could
// only refuse. The first waiter's own first round is a SET (the control:
// the counts see such a round), and the two are served in FIFO order.
func TestAcquireQueuesAtOnceWhereItWaits(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	holder := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second))
	// Without the local queue, the client's second caller goes to the nodes
	// itself instead of waiting behind the first in the process.
	waiters := urlLockClient(t, c, redlock.WithNodeTimeout(time.Second), locktest.WithLocalQueue(false))
	lockUnlock(t, holder, "warm-up")
	lockUnlock(t, waiters, "warm-up")
	h, err := holder.Acquire(within(t, time.Minute), "hot", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	order, errs := make(chan string, 2), make(chan error, 2)
	wait := func(name string) {
		l, err := waiters.Acquire(within(t, time.Minute), "hot", 10*time.Second)
		if err == nil {
			order <- name
			err = l.Release(within(t, time.Minute))
		}
		errs <- err
	}
	sets0 := sum(commandCalls(t, c, "set"))
	go wait("first")
	waitQueued(t, c, "hot", 1)
	sets1 := sum(commandCalls(t, c, "set"))
	if d := sets1 - sets0; d != len(c.Nodes) {
		t.Fatalf("the first waiter's first round ran %d SETs, want %d (one per node)", d, len(c.Nodes))
	}
	go wait("second")
	waitQueued(t, c, "hot", 2)
	if d := sum(commandCalls(t, c, "set")) - sets1; d != 0 {
		t.Errorf("a waiter of a resource its client watches ran %d SETs before queueing, want none", d)
	}
	if err := h.Release(within(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first", "second"} {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if got := <-order; got != want {
			t.Fatalf("the %s waiter got the lock before the one queued ahead of it", got)
		}
	}
}
