package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// recoveryBound is how long after a replica's promotion lock node 0 may take
// to grant on the failed-over shard's slots again: 20 cluster-node-timeouts
// (1s, redistest.StartReplicatedCluster), generous for a loaded machine.
// go-redis alone took a whole ClusterStateReloadInterval (60s) to notice.
const recoveryBound = 20 * time.Second

// TestClusterShardFailover: lock node 0 is a 3-shard cluster with a replica
// per master; its first master is killed during a run. Every lock stays
// exclusive and acquirable (the two other nodes keep the quorum), and once
// the replica took over, node 0 grants locks on that shard's slots again
// within recoveryBound. Then a second master is killed while nobody locks:
// node 0 recovers as fast from the first call that finds the shard moved.
func TestClusterShardFailover(t *testing.T) {
	// Parallel: most of its time is spent waiting for the replicas'
	// promotions, on servers of its own; its bound is 20 node timeouts.
	t.Parallel()
	start := time.Now()
	phase := func(format string, args ...any) {
		t.Logf("%5.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	masters, replicas := redistest.StartReplicatedCluster(t, 3)
	plain := redistest.StartCluster(t, 2)
	seeds := []string{masters[1].Addr(), masters[2].Addr(), replicas[0].Addr()}
	urls := append([]string{redistest.LockClusterURL(seeds)}, plain.URLs()...)
	c := newClusterLocks(t, urls)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	phase("clusters up; killing master %s under load", masters[0].Addr())

	var promoted atomic.Bool
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { errs <- failoverWorker(ctx, c, g, &promoted) })
	}
	failedOver := waitPromoted(ctx, t, replicas[0].Addr(), func() {
		if err := masters[0].Kill(); err != nil {
			t.Error(err)
		}
	})
	promoted.Store(true)
	phase("replica %s promoted: %v", replicas[0].Addr(), failedOver)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !failedOver {
		t.Fatal("the replica was not promoted within the test's budget")
	}
	phase("workers done")
	waitNodeZeroHolds(ctx, t, c, "after", phase)

	phase("killing master %s with no lock traffic", masters[1].Addr())
	if !waitPromoted(ctx, t, replicas[1].Addr(), func() {
		if err := masters[1].Kill(); err != nil {
			t.Error(err)
		}
	}) {
		t.Fatal("the second replica was not promoted within the test's budget")
	}
	phase("replica %s promoted", replicas[1].Addr())
	waitNodeZeroHolds(ctx, t, c, "idle", phase)
}

// failoverWorker locks and unlocks 8 resources of its own in turn, through
// the kill and the failover, until the replica was promoted and 200 more
// rounds ran, checking exclusion by a second TryAcquire on each held lock.
func failoverWorker(ctx context.Context, c *redlock.Client, g int, promoted *atomic.Bool) error {
	after := 0
	for i := 0; after < 200; i++ {
		if ctx.Err() != nil {
			return fmt.Errorf("worker %d: %w after %d rounds", g, ctx.Err(), i)
		}
		if promoted.Load() {
			after++
		}
		name := fmt.Sprintf("fo-%d-%d", g, i%8)
		l, err := c.TryAcquire(ctx, name, 30*time.Second)
		if err != nil {
			return fmt.Errorf("worker %d: %q: %w", g, name, err)
		}
		if _, err := c.TryAcquire(ctx, name, 30*time.Second); !errors.Is(err, redlock.ErrLocked) {
			return fmt.Errorf("worker %d: %q held twice: %v", g, name, err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("worker %d: release %q: %w", g, name, err)
		}
	}
	return nil
}

// waitPromoted runs kill, then waits until the replica at addr reports
// itself a master; it reports whether it did before ctx ended.
func waitPromoted(ctx context.Context, t *testing.T, addr string, kill func()) bool {
	t.Helper()
	cl := redis.NewClient(redistest.ClientOptions(addr))
	defer cl.Close()
	kill()
	for ctx.Err() == nil {
		info, err := cl.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// waitNodeZeroHolds waits, at most recoveryBound, until locks on 30
// resources named prefix-i (over every slot range) are held on all three
// nodes, node 0's failed-over shards included. It logs node 0's first
// refusal and the recovery through phase.
func waitNodeZeroHolds(ctx context.Context, t *testing.T, c *redlock.Client, prefix string, phase func(string, ...any)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	refused := 0
	for i := 0; i < 30; {
		name := fmt.Sprintf("%s-%d", prefix, i)
		l, err := c.TryAcquire(ctx, name, 30*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		states, err := c.Inspect(ctx, name)
		_ = l.Release(ctx)
		if err == nil && states[0].Token == l.Token() {
			i++
			continue
		}
		if refused++; refused == 1 {
			phase("node 0 does not hold %q: %v %+v", name, err, states)
		}
		if ctx.Err() != nil {
			t.Fatalf("%q: node 0 still not holding %v after the failover (%d refusals): %v %+v",
				name, recoveryBound, refused, err, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
	phase("node 0 holds all %d %s-* resources (%d refusals on the way)", 30, prefix, refused)
}
