package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// faultClient returns a Client over the cluster's nodes whose calls give up
// on a paused node within 300ms.
func faultClient(t *testing.T, cl *redistest.Cluster) *Client {
	t.Helper()
	c, err := NewFromURLs(cl.URLs(), WithNodeTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRecordSurvivesBareMajorityAndOneDataLoss on 3 real
// redis-server nodes: a lock kept by a bare majority (its third node paused
// past the key's TTL) records its completion with its release; the paused
// node, continued, gets the release late, where the key has expired; then
// one node of the majority restarts empty. The lock survived a paused
// minority, and so must its record: every later acquisition finds it, as
// a majority release plus one empty restart is covered (docs/guide/RELIABILITY.md).
// The release's record goes to every node the release reaches, its key
// there or not; before, the late node wrote none, and an acquisition that
// returned at a quorum of the empty node and the late one missed it.
func TestRecordSurvivesBareMajorityAndOneDataLoss(t *testing.T) {
	const ttl = time.Second
	nodes := redistest.StartCluster(t, 3)
	c := faultClient(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	once := withCompletion("task-1", time.Hour)
	l, err := c.Acquire(ctx, "r", ttl, once)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := l.KeepAlive(ctx)
	if err := nodes.Nodes[2].Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 500*time.Millisecond) // the key expires on the paused node
	if kctx.Err() != nil {
		t.Fatalf("the lock was lost though a majority kept it: %v", context.Cause(kctx))
	}
	if err := l.recordCompletion(0); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release by the majority: %v", err)
	}
	if err := nodes.Nodes[2].Cont(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the late node reads the release
	if err := nodes.Nodes[0].Restart(ttl + 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	missed := 0
	const tries = 6
	for range tries {
		fresh := faultClient(t, nodes)
		again, err := fresh.TryAcquire(ctx, "r", ttl, once)
		if err != nil {
			t.Fatal(err)
		}
		if again.completedRun() < 0 {
			missed++
		}
		_ = again.Release(ctx)
		_ = fresh.Close()
	}
	if missed > 0 {
		t.Fatalf("%d of %d acquisitions missed the record of a release kept by a majority, after one node's data loss", missed, tries)
	}
}
