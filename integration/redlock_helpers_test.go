package integration

import (
	"context"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// lockClient returns a redlock Client over the cluster's nodes, closed at
// the end of the test. Each call gives an independent client (its own
// connections and local queue), like a separate process.
func lockClient(t testing.TB, c *redistest.Cluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	cl, err := redlock.New(c.Clients(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// urlLockClient is a lock client as production code builds it:
// NewFromURLs, whose clients are tuned for locking and speak RESP2.
func urlLockClient(t testing.TB, c *redistest.Cluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	cl, err := redlock.NewFromURLs(c.URLs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// clientKinds are the two ways to build a lock client: over the caller's
// go-redis clients (RESP3, go-redis's default) and from URLs (RESP2).
var clientKinds = []struct {
	name string
	make func(testing.TB, *redistest.Cluster, ...redlock.Option) *redlock.Client
}{
	{"New-RESP3", lockClient},
	{"NewFromURLs-RESP2", urlLockClient},
}

// within returns a context bounded by d, cancelled at the end of the test.
func within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// holdOnAllNodes locks resource for ttl on every node, not only a quorum,
// for tests whose scenario starts from a key on each node. An acquisition
// returns once a quorum holds; under load another node may miss it, or its
// SET may still be on the way (Inspect queues behind it on each node's
// connection, so seeing the token everywhere means no SET is left in
// flight). Retries at most 20 times.
func holdOnAllNodes(t *testing.T, cl *redlock.Client, resource string, ttl time.Duration) *redlock.Lock {
	t.Helper()
	ctx := within(t, time.Minute)
	for range 20 {
		l, err := cl.Acquire(ctx, resource, ttl)
		if err != nil {
			t.Fatal(err)
		}
		states, err := cl.Inspect(ctx, resource)
		if err != nil {
			t.Fatal(err)
		}
		everywhere := true
		for _, s := range states {
			everywhere = everywhere && s.Token == l.Token()
		}
		if everywhere {
			return l
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s not held on all nodes in 20 acquisitions", resource)
	return nil
}
