package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// clusterShards is the number of masters of each cluster lock node.
const clusterShards = 3

// clusterRounds repeats BenchmarkClusterNodes' four sub-benchmarks in turn,
// so that plain and cluster runs alternate (-count repeats each in a row).
var clusterRounds = flag.Int("bench.clusterrounds", 1, "BenchmarkClusterNodes: rounds of plain and cluster runs, alternated")

// BenchmarkClusterNodes measures asynqlock's lock+unlock throughput on
// distinct keys (distinctWorkers goroutines, one attempt each) over three
// plain redis-server nodes and over three lock nodes that are each a Redis
// Cluster of three masters, side by side in one run. All servers are direct
// (no test proxy) and clients come from NewFromURLs, so only the node kind
// differs. Reports ops/s and the p50 of one lock+unlock.
func BenchmarkClusterNodes(b *testing.B) {
	var plain []string
	for range 3 {
		plain = append(plain, "redis://"+redistest.StartServer(b).Addr())
	}
	clusters, _ := redistest.StartLockClusters(b, 3, clusterShards)
	kinds := []struct {
		name string
		urls []string
	}{{"plain-3", plain}, {fmt.Sprintf("cluster-3x%d", clusterShards), clusters}}
	for range max(*clusterRounds, 1) {
		for _, fenced := range []bool{false, true} {
			for _, kind := range kinds {
				name := kind.name
				if fenced {
					name += "-fenced"
				}
				b.Run(name, func(b *testing.B) { runClusterNodes(b, kind.urls, fenced) })
			}
		}
	}
}

// runClusterNodes is one sub-benchmark of BenchmarkClusterNodes.
func runClusterNodes(b *testing.B, urls []string, fenced bool) {
	// A patient node timeout: this compares throughput, and a node timeout
	// on a loaded machine would fail the run rather than slow it.
	timeout := 500 * time.Millisecond
	if *nodeTimeout > 0 {
		timeout = *nodeTimeout
	}
	rc, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(timeout))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	var lo []redlock.LockOption
	if fenced {
		lo = append(lo, redlock.WithFencing())
	}
	prefix := "cn:" + stamp(b.Name()) + ":"
	if _, err := distinctRun(b.Context(), rc, prefix, 4*distinctWorkers, lo); err != nil { // dial, load scripts
		b.Fatalf("warm-up: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	lat, err := distinctRun(b.Context(), rc, prefix, int64(b.N), lo)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(micros(percentile(lat, 0.50)), "p50-µs")
}

// distinctRun runs total lock+unlock pairs over distinctWorkers goroutines,
// each on its own key (many keys, so spread over every shard), and returns
// each pair's latency.
func distinctRun(ctx context.Context, rc *redlock.Client, prefix string, total int64, lo []redlock.LockOption) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, opBudget)
	defer cancel()
	fe := &firstError{cancel: cancel}
	var next atomic.Int64
	lats := make([][]time.Duration, distinctWorkers)
	var wg sync.WaitGroup
	for g := range distinctWorkers {
		wg.Go(func() {
			for i := next.Add(1); i <= total && ctx.Err() == nil; i = next.Add(1) {
				key := prefix + strconv.Itoa(g) + ":" + strconv.FormatInt(i%64, 10)
				t0 := time.Now()
				l, err := rc.TryAcquire(ctx, key, ttl, lo...)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					fe.set(fmt.Errorf("goroutine %d: %w", g, err))
					return
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	return slices.Concat(lats...), fe.get()
}
