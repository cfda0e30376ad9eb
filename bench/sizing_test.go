package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Sizing figures for docs/guide/OPERATIONS.md#sizing, measured on real
// redis-servers: `go test -run '^$' -bench Sizing -benchtime 1x`.

// usedMemory is INFO memory's used_memory of a server.
func usedMemory(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatal("no used_memory in INFO memory")
	return 0
}

// serverCPU is a redis-server's user+system CPU time so far (/proc).
func serverCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

// direct returns clients straight to the nodes' servers (no test proxy).
func direct(tb testing.TB, c *redistest.Cluster) []redis.UniversalClient {
	tb.Helper()
	var out []redis.UniversalClient
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.ServerAddr(), PoolSize: 64})
		tb.Cleanup(func() { cl.Close() })
		out = append(out, cl)
	}
	return out
}

// parallel runs fn(i) for i in [0, n) on 32 goroutines.
func parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// taskHolder names a task as the worker does in its locks' values (task
// type and a 36-character asynq task ID).
func taskHolder(i int) context.Context {
	return redlock.ContextWithHolder(context.Background(), fmt.Sprintf("stock:adjust 0b5b9a8e-6f1c-4c1e-9d3a-%012d", i))
}

// BenchmarkSizingLockMemory: used_memory per held lock on a node, plain and
// fenced (the fence counter is one more key per resource).
func BenchmarkSizingLockMemory(b *testing.B) {
	const n = 20000
	for _, fenced := range []bool{false, true} {
		c := redistest.StartCluster(b, 1)
		nodes := direct(b, c)
		rc, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var opts []redlock.LockOption
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		before := usedMemory(b, nodes[0].(*redis.Client))
		parallel(n, func(i int) {
			if _, err := rc.TryAcquire(taskHolder(i), fmt.Sprintf("task:stock:adjust:sku-%07d", i), 10*time.Minute, opts...); err != nil {
				b.Error(err)
			}
		})
		after := usedMemory(b, nodes[0].(*redis.Client))
		b.ReportMetric(float64(after-before)/n, map[bool]string{false: "B/lock", true: "B/fenced-lock"}[fenced])
		rc.Close()
	}
}

// BenchmarkSizingLockCPU: each lock node's CPU per lock+unlock (3 nodes,
// distinct keys, 32 goroutines), as cores per 1,000 lock+unlock/s; "plain"
// without a completion record, "recorded" with one written by each release
// (the middleware's default): a new record on every node, as every task of
// a resource writes.
func BenchmarkSizingLockCPU(b *testing.B) {
	for _, recorded := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "recorded"}[recorded], func(b *testing.B) { sizeLockCPU(b, recorded) })
	}
}

// sizeLockCPU is one variant of BenchmarkSizingLockCPU.
func sizeLockCPU(b *testing.B, recorded bool) {
	c := redistest.StartCluster(b, 3)
	rc, err := redlock.New(direct(b, c), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	const n = 30000
	cpu0 := serverCPU(b, c.Nodes[0].PID())
	start := time.Now()
	parallel(n, func(i int) {
		var opts []redlock.LockOption
		if recorded {
			opts = append(opts, locktest.WithCompletion(recordName(strconv.Itoa(i)), time.Hour))
		}
		l, err := rc.TryAcquire(taskHolder(i), fmt.Sprintf("task:stock:adjust:sku-%07d", i), 10*time.Second, opts...)
		if err == nil && recorded {
			err = locktest.RecordCompletion(l, 0)
		}
		if err == nil {
			err = l.Release(context.Background())
		}
		if err != nil {
			b.Error(err)
		}
	})
	elapsed := time.Since(start)
	cpu := serverCPU(b, c.Nodes[0].PID()) - cpu0
	b.ReportMetric(float64(n)/elapsed.Seconds(), "lock+unlock/s")
	b.ReportMetric(cpu.Seconds()/n*1000, "node-core/1k-ops/s")
}

// BenchmarkSizingParkedMemory: the broker's used_memory per parked task, all
// included (its record, its mark, asynq's retry entry instead of a pending
// one, the error asynq stores), with the hot resource held meanwhile.
func BenchmarkSizingParkedMemory(b *testing.B) {
	c := redistest.StartCluster(b, 4)
	broker := redis.NewClient(&redis.Options{Addr: c.Nodes[0].ServerAddr()})
	defer broker.Close()
	locks := make([]string, 0, 3)
	for _, n := range c.Nodes[1:] {
		locks = append(locks, "redis://"+n.ServerAddr())
	}
	cfg, err := worker.LoadConfigFrom(map[string]string{"ASYNQ_REDIS_URL": "redis://" + c.Nodes[0].ServerAddr(),
		"REDLOCK_NODES": strings.Join(locks, ","), "WORKER_CONCURRENCY": "10", "METRICS_ADDR": "off", "LOG_LEVEL": "error"})
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(cfg, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Handle("stock:adjust", asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), middleware.ByField("sku")); err != nil {
		b.Fatal(err)
	}
	holder, err := redlock.NewFromURLs(locks)
	if err != nil {
		b.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.TryAcquire(context.Background(), "task:stock:adjust:HOT", 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	const n = 2000
	for i := range n {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", fmt.Appendf(nil, `{"sku":"HOT","n":%d}`, i))); err != nil {
			b.Fatal(err)
		}
	}
	pending := usedMemory(b, broker)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: c.Nodes[0].ServerAddr()})
	defer insp.Close()
	best, mem := 0, pending
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		qi, err := insp.GetQueueInfo("default") // nothing but parked tasks is retried here
		if err != nil {
			b.Fatal(err)
		}
		if qi.Retry > best {
			best, mem = qi.Retry, usedMemory(b, broker)
		} else if best > 0 && qi.Retry <= best {
			break // every task that will be parked is
		}
	}
	if best == 0 {
		b.Fatal("no task was parked")
	}
	b.ReportMetric(float64(best), "parked")
	b.ReportMetric(float64(mem-pending)/float64(best), "B/parked-task")
}
