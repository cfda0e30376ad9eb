package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// clusterKey is the lock key of a resource name under the default prefix:
// the name as hash tag, or, for a name with '}', a hash of it (see
// redlock/keys.go).
func clusterKey(name string) string {
	if !strings.Contains(name, "}") {
		return "asynqlock:{" + name + "}"
	}
	sum := sha256.Sum256([]byte(name))
	return "asynqlock:{" + hex.EncodeToString(sum[:8]) + "}" + name
}

// clusterClients are cluster clients to each lock node, for looking at the
// nodes' keys and subscriptions.
func clusterClients(t *testing.T, addrs [][]string) []*redis.ClusterClient {
	t.Helper()
	ccs := make([]*redis.ClusterClient, len(addrs))
	for i, a := range addrs {
		ccs[i] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: a})
		t.Cleanup(func() { _ = ccs[i].Close() })
	}
	return ccs
}

// masterOf is the address of the master of cc holding key's slot.
func masterOf(ctx context.Context, t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// clusterFIFOCase: five clients (five processes' worth) queue for a
// resource one after the other, each once the previous one is in every
// node's waiter queue; when another client releases it, the resource goes
// to them in their order of arrival, on a plain name and on one with '}'.
// Their retry delay is a minute, past the round's bound: each is woken by
// the release announcement, wherever its client's pub/sub connection sits
// (go-redis opens it on a random master of each node).
func clusterFIFOCase(t *testing.T, urls []string, addrs [][]string) {
	ctx := within(t, 3*time.Minute)
	ccs := clusterClients(t, addrs)
	holder := newClusterLocks(t, urls)
	waiters := make([]*redlock.Client, 5)
	for i := range waiters {
		waiters[i] = newClusterLocks(t, urls, redlock.WithRetryDelay(time.Minute, time.Minute))
	}
	for _, name := range []string{"fifo-a", "fifo-}b"} {
		fifoRound(ctx, t, holder, waiters, ccs, name)
	}
}

// fifoRound holds name by holder, queues the waiters in turn, releases and
// checks the order in which they got the lock.
func fifoRound(ctx context.Context, t *testing.T, holder *redlock.Client, waiters []*redlock.Client, ccs []*redis.ClusterClient, name string) {
	t.Helper()
	held, err := holder.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	order, errs := make(chan int, len(waiters)), make(chan error, len(waiters))
	for i, w := range waiters {
		go func() {
			l, err := w.Acquire(rctx, name, time.Minute)
			if err == nil {
				order <- i
				err = l.Release(ctx)
			}
			errs <- err
		}()
		waitClusterQueued(ctx, t, ccs, name, i+1)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("%s: a waiter: %v", name, err)
		}
	}
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("%s: waiters served in order %v, want their arrival order %v", name, got, want)
	}
}

// waitClusterQueued waits until name's waiter queue holds n waiters on every node.
func waitClusterQueued(ctx context.Context, t *testing.T, ccs []*redis.ClusterClient, name string, n int) {
	t.Helper()
	ok := waitUntil(30*time.Second, func() bool {
		for _, cc := range ccs {
			if c, err := cc.ZCard(ctx, clusterKey(name)+":q").Result(); err != nil || c != int64(n) {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("%s: waiter %d not queued on every node within 30s", name, n)
	}
}

// subscribers maps each master of cc to its subscriptions to channel.
func subscribers(ctx context.Context, t *testing.T, cc *redis.ClusterClient, channel string) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	subs := map[string]int64{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		c, err := m.PubSubNumSub(ctx, channel).Result()
		mu.Lock()
		subs[m.Options().Addr] = c[channel]
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return subs
}

// clusterCrossShardWakeCase: a waiter whose pub/sub connection sits, on
// every node, on another master than the key of the resource it waits
// for (the release is announced on the key's master) is woken by the
// release. Its retry delay is a minute, past the wait's bound: only the
// announcement can bring it the lock in time. go-redis opens the
// connection on a random master of each node; when a client's masters
// leave no such resource (they are one of each shard), another client is
// tried.
func clusterCrossShardWakeCase(t *testing.T, urls []string, addrs [][]string) {
	ctx := within(t, 2*time.Minute)
	ccs := clusterClients(t, addrs)
	holder := newClusterLocks(t, urls)
	for try := range 16 {
		// A node timeout far above the machine's worst delay: one node
		// missing the waiter's queued round would leave it to the minute's
		// retry, past the wait's bound (seen once under a loaded full run).
		waiter := newClusterLocks(t, urls, redlock.WithRetryDelay(time.Minute, time.Minute), redlock.WithNodeTimeout(5*time.Second))
		at := subscribedAt(ctx, t, holder, waiter, ccs, fmt.Sprintf("wake-probe-%d", try))
		name, ok := elsewhere(ctx, t, ccs, at)
		if !ok {
			_ = waiter.Close()
			continue
		}
		waitBehind(ctx, t, holder, waiter, ccs, name, func() {
			for i, cc := range ccs {
				if subs := subscribers(ctx, t, cc, clusterKey(name)+":released"); subs[at[i]] != 1 || subs[masterOf(ctx, t, cc, clusterKey(name))] != 0 {
					t.Fatalf("node %d: subscriptions %v, want the waiter's on %s, none on the key's master", i, subs, at[i])
				}
			}
		})
		return
	}
	t.Fatal("16 clients' pub/sub connections all sat on one master of each shard")
}

// subscribedAt returns, per node, the master the waiter's pub/sub
// connection sits on: it has the waiter wait for probe behind holder.
func subscribedAt(ctx context.Context, t *testing.T, holder, waiter *redlock.Client, ccs []*redis.ClusterClient, probe string) []string {
	t.Helper()
	var at []string
	waitBehind(ctx, t, holder, waiter, ccs, probe, func() {
		for _, cc := range ccs {
			for m, n := range subscribers(ctx, t, cc, clusterKey(probe)+":released") {
				if n > 0 {
					at = append(at, m)
				}
			}
		}
		if len(at) != len(ccs) {
			t.Fatalf("the waiter's subscriptions are on masters %v, want one per node", at)
		}
	})
	return at
}

// elsewhere returns a resource name whose key is, on every node i, on
// another master than at[i]; false if none is (at holds every shard).
func elsewhere(ctx context.Context, t *testing.T, ccs []*redis.ClusterClient, at []string) (string, bool) {
	t.Helper()
	for i := range 256 {
		name, apart := fmt.Sprintf("wake-%d", i), true
		for n, cc := range ccs {
			apart = apart && masterOf(ctx, t, cc, clusterKey(name)) != at[n]
		}
		if apart {
			return name, true
		}
	}
	return "", false
}

// waitBehind has holder hold name and waiter wait for it; once the waiter
// is queued on every node, queued runs, then holder releases, and the
// waiter must get the lock within 45s (it then releases it).
func waitBehind(ctx context.Context, t *testing.T, holder, waiter *redlock.Client, ccs []*redis.ClusterClient, name string, queued func()) {
	t.Helper()
	held, err := holder.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returns at a quorum: on a node its SET had not reached yet the
	// waiter's turn round would take the free key instead of queueing there,
	// and only its retry a minute later would queue it.
	if !waitUntil(30*time.Second, func() bool {
		for _, cc := range ccs {
			if cc.Exists(ctx, clusterKey(name)).Val() != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("%s: the holder's key not on every node within 30s", name)
	}
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(wctx, name, time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitClusterQueued(ctx, t, ccs, name, 1)
	queued()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("%s: the waiter: %v", name, err)
	}
}
