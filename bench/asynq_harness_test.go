package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// taskType is the type of every task of the middleware benchmarks.
const taskType = "stock:adjust"

// quietAsynq drops asynq's own log lines.
type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(...any) {}
func (quietAsynq) Fatal(...any) {}

// addrOf is the address the benchmarks dial for n: redis-server itself, or
// its in-process proxy with -bench.proxy.
func addrOf(n *redistest.Node) string {
	if *viaProxy {
		return n.Addr()
	}
	return n.ServerAddr()
}

// brokerOpt is the asynq connection to the broker node (asynq's defaults
// otherwise: PoolSize 10 per CPU).
func brokerOpt(broker *redistest.Node) asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: addrOf(broker)}
}

// nodeClient returns a go-redis client to n built like the lock nodes'
// clients (redistest.ClientOptions, PoolSize from -bench.pool), closed by
// tb.Cleanup.
func nodeClient(tb testing.TB, n *redistest.Node) *redis.Client {
	tb.Helper()
	o := redistest.ClientOptions(addrOf(n))
	o.PoolSize = *poolSize
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// flush empties the given nodes (the broker and the store between two
// sub-benchmark runs), so that every run starts from the same state.
func flush(tb testing.TB, ns ...*redistest.Node) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	for _, n := range ns {
		c := redis.NewClient(redistest.ClientOptions(addrOf(n)))
		err := c.FlushAll(ctx).Err()
		_ = c.Close()
		if err != nil {
			tb.Fatalf("FLUSHALL %s: %v", addrOf(n), err)
		}
	}
}

// freshQueue names a queue no earlier run used.
func freshQueue(name string) string {
	return "bench-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// serverConfig is an asynq server config wired for the middleware as in the
// integration tests: conflicts are not failures and come back soon, delayed
// tasks are forwarded every 100ms, an empty queue is polled every 50ms.
func serverConfig(queue string, concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{queue: 1},
		IsFailure:                middleware.IsFailure,
		RetryDelayFunc:           middleware.RetryDelay,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		Logger:                   quietAsynq{},
		LogLevel:                 asynq.FatalLevel,
	}
}

// newServer returns an asynq server on broker, shut down by tb.Cleanup if it
// was started. Register it after the lock clients its handler uses, so that
// it stops before they close.
func newServer(tb testing.TB, broker *redistest.Node, cfg asynq.Config) *asynq.Server {
	tb.Helper()
	srv := asynq.NewServer(brokerOpt(broker), cfg)
	tb.Cleanup(srv.Shutdown) // a no-op on a server that never started
	return srv
}

func asynqClient(tb testing.TB, broker *redistest.Node) *asynq.Client {
	tb.Helper()
	c := asynq.NewClient(brokerOpt(broker))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// adjustment is the payload of a task: add delta to the stock of sku.
type adjustment struct {
	ID    int    `json:"id"`
	SKU   string `json:"sku"`
	Delta int64  `json:"delta"`
}

func (a adjustment) task() *asynq.Task {
	p, err := json.Marshal(a)
	if err != nil {
		panic(err) // cannot happen for this type
	}
	return asynq.NewTask(taskType, p)
}

func decode(t *asynq.Task) (adjustment, error) {
	var a adjustment
	if err := json.Unmarshal(t.Payload(), &a); err != nil {
		return a, fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	return a, nil
}

// warmLocks opens the lock client's connections and loads its scripts, so
// that no measured task pays for them: 16 keys locked and released at once.
func warmLocks(tb testing.TB, rc *redlock.Client, prefix string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			l, err := rc.TryAcquire(ctx, prefix+"warm-"+strconv.Itoa(i), ttl)
			if err == nil {
				err = l.Release(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatalf("lock warm-up: %v", err)
		}
	}
}

// counter counts what the observer saw: conflicts by action.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) observe(e middleware.Event) {
	if e.Kind != "conflict" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[e.Action]++
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.m {
		n += v
	}
	return n
}

// drained waits (bounded) until queue has nothing pending, active, scheduled
// or in retry, and returns its final state.
func drained(tb testing.TB, broker *redistest.Node, queue string, limit time.Duration) *asynq.QueueInfo {
	tb.Helper()
	insp := asynq.NewInspector(brokerOpt(broker))
	defer func() { _ = insp.Close() }()
	deadline := time.Now().Add(limit)
	for range int(limit/(20*time.Millisecond)) + 1 {
		qi, err := insp.GetQueueInfo(queue)
		if err != nil {
			tb.Fatalf("queue %s: %v", queue, err)
		}
		if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
			return qi
		}
		if time.Now().After(deadline) {
			tb.Fatalf("queue %s not drained after %v: %+v", queue, limit, qi)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("queue %s not drained after %v", queue, limit)
	return nil
}

// serversCPU sums used_cpu_user and used_cpu_sys of INFO cpu over the given
// redis-server nodes: the CPU time they used so far.
func serversCPU(tb testing.TB, ns ...*redistest.Node) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	var sum time.Duration
	for _, n := range ns {
		c := redis.NewClient(redistest.ClientOptions(addrOf(n)))
		info, err := c.Info(ctx, "cpu").Result()
		_ = c.Close()
		if err != nil {
			tb.Fatalf("INFO cpu %s: %v", addrOf(n), err)
		}
		for line := range strings.Lines(info) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
				continue
			}
			s, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu %s: %s: %v", addrOf(n), line, err)
			}
			sum += time.Duration(s * float64(time.Second))
		}
	}
	return sum
}
