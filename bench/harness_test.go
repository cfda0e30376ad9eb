package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

var (
	viaProxy = flag.Bool("bench.proxy", false,
		"dial the harness's in-process fault proxies (Node.Addr) instead of redis-server itself (Node.ServerAddr)")
	poolSize = flag.Int("bench.pool", 32,
		"go-redis PoolSize of every node client (the harness default is 8, too few for 32 goroutines)")
	nodeTimeout = flag.Duration("bench.nodetimeout", 0,
		"asynqlock per-node timeout (0: the library default, 50ms); redsync's is ttl*0.05 = 400ms")
	batchWindow = flag.Duration("bench.batchwindow", -1,
		"asynqlock batch window, set through worker/internal/lockadmin (negative: the library default, 100µs; 0 turns it off)")
	hotFor = flag.Duration("bench.hotfor", 3*time.Second,
		"how long each BenchmarkHotKey sub-benchmark runs, whatever b.N is")
)

const (
	// nodes is the number of independent redis-server masters.
	nodes = 5
	// ttl is the lock TTL of every contender.
	ttl = 8 * time.Second
	// opBudget bounds a whole sub-benchmark's run: every library call gets
	// a context that ends then, and loops stop with a failure past it.
	opBudget = 90 * time.Second
	// redsyncTries is what Lock may use in the hot-key benchmark: enough
	// never to run out within -bench.hotfor at the default 50–250ms delay.
	redsyncTries = 1000
)

// nodeClients returns one new go-redis client per node with the harness's
// client options (fail-fast dial and I/O timeouts, MaxRetries -1,
// ContextTimeoutEnabled, no CLIENT SETINFO), PoolSize from -bench.pool. Every
// contender gets its own clients built the same way; they are closed by
// tb.Cleanup.
func nodeClients(tb testing.TB, c *redistest.Cluster) []redis.UniversalClient {
	tb.Helper()
	out := make([]redis.UniversalClient, len(c.Nodes))
	for i, n := range c.Nodes {
		addr := n.ServerAddr()
		if *viaProxy {
			addr = n.Addr()
		}
		o := redistest.ClientOptions(addr)
		o.PoolSize = *poolSize
		o.Protocol = 2 // as NewFromURLs does for lock nodes
		cl := redis.NewClient(o)
		tb.Cleanup(func() { _ = cl.Close() })
		out[i] = cl
	}
	return out
}

// lockFunc and unlockFunc are one goroutine's handle on one resource.
type (
	lockFunc   func(ctx context.Context) error
	unlockFunc func(ctx context.Context) error
)

// lib is one contender opened over a cluster.
type lib struct {
	// once locks key with a single attempt, as a caller with a new key does
	// (a new redsync Mutex, or TryAcquire), then unlocks it.
	once func(ctx context.Context, key string) error
	// handle returns lock/unlock functions on key for one goroutine (one
	// redsync Mutex, reused). With wait, lock waits for the resource
	// (Acquire, Lock with retries); otherwise it makes one attempt.
	handle func(key string, wait bool) (lockFunc, unlockFunc)
}

// contender opens a library over the cluster. For the hot-key benchmark,
// worker tells which of the 8 contending goroutines asks: contenders that
// emulate separate processes hand each worker its own client.
type contender struct {
	name string
	open func(tb testing.TB, c *redistest.Cluster) func(worker int) lib
}

// contenders are compared by every benchmark, in this order.
var contenders = []contender{
	{"asynqlock", openAsynqlock},
	{"redsync", openRedsync(false)},
	{"redsync-failfast", openRedsync(true)},
}

// asynqlockAcquire is asynqlock taking every lock with Acquire, the entry
// point of every caller that waits (the middleware, Run, the hot key), where
// the plain asynqlock contender makes one attempt with TryAcquire.
var asynqlockAcquire = contender{"asynqlock-acquire", openAsynqlockAcquire}

// lockContenders are compared by the uncontended benchmarks: both of
// asynqlock's entry points against redsync.
var lockContenders = []contender{contenders[0], asynqlockAcquire, contenders[1], contenders[2]}

// pingQuorum is the floor of a lock+unlock's latency on these nodes: two
// rounds of a PING to every node at once, one goroutine per node as
// redsync sends its commands, each round ending at the third answer (a
// quorum). No lock library that sends each round to every node and waits
// for a quorum, through go-redis, can be faster. BenchmarkAcquireRelease
// only.
var pingQuorum = contender{"ping-quorum-floor", openPingQuorum}

func openPingQuorum(tb testing.TB, c *redistest.Cluster) func(int) lib {
	clients := nodeClients(tb, c)
	q := len(clients)/2 + 1
	round := func(ctx context.Context) error {
		errs := make(chan error, len(clients))
		for _, cl := range clients {
			go func() { errs <- cl.Ping(ctx).Err() }()
		}
		for range q {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	}
	l := lib{once: func(ctx context.Context, _ string) error {
		if err := round(ctx); err != nil {
			return err
		}
		return round(ctx)
	}}
	return func(int) lib { return l }
}

// asynqlockPerWorker emulates one process per hot-key worker: each gets its
// own redlock.Client over its own node clients, so there is no shared local
// queue and they contend on the nodes as separate processes would.
var asynqlockPerWorker = contender{"asynqlock-8clients", openAsynqlockPerWorker}

func newRedlock(tb testing.TB, c *redistest.Cluster, opts ...redlock.Option) *redlock.Client {
	tb.Helper()
	if *nodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(*nodeTimeout))
	}
	if *batchWindow >= 0 {
		opts = append(opts, locktest.WithBatchWindow(*batchWindow))
	}
	rc, err := redlock.New(nodeClients(tb, c), opts...)
	if err != nil {
		tb.Fatalf("redlock.New: %v", err)
	}
	// Registered after the node clients' cleanups, so it runs before them.
	tb.Cleanup(func() {
		if err := rc.Close(); err != nil {
			tb.Errorf("redlock Close: %v", err)
		}
	})
	return rc
}

func openAsynqlock(tb testing.TB, c *redistest.Cluster) func(int) lib {
	l := asynqlockLib(newRedlock(tb, c))
	return func(int) lib { return l }
}

func openAsynqlockAcquire(tb testing.TB, c *redistest.Cluster) func(int) lib {
	rc := newRedlock(tb, c)
	l := asynqlockLib(rc)
	l.once = func(ctx context.Context, key string) error {
		lk, err := rc.Acquire(ctx, key, ttl)
		if err != nil {
			return fmt.Errorf("Acquire: %w", err)
		}
		if err := lk.Release(ctx); err != nil {
			return fmt.Errorf("Release: %w", err)
		}
		return nil
	}
	handle := l.handle
	l.handle = func(key string, _ bool) (lockFunc, unlockFunc) { return handle(key, true) }
	return func(int) lib { return l }
}

func openAsynqlockPerWorker(tb testing.TB, c *redistest.Cluster) func(int) lib {
	libs := map[int]lib{}
	return func(w int) lib {
		l, ok := libs[w]
		if !ok {
			l = asynqlockLib(newRedlock(tb, c))
			libs[w] = l
		}
		return l
	}
}

func asynqlockLib(rc *redlock.Client) lib {
	return lib{
		once: func(ctx context.Context, key string) error {
			l, err := rc.TryAcquire(ctx, key, ttl)
			if err != nil {
				return fmt.Errorf("TryAcquire: %w", err)
			}
			if err := l.Release(ctx); err != nil {
				return fmt.Errorf("Release: %w", err)
			}
			return nil
		},
		handle: func(key string, wait bool) (lockFunc, unlockFunc) {
			var held *redlock.Lock
			lock := func(ctx context.Context) (err error) {
				if wait {
					held, err = rc.Acquire(ctx, key, ttl)
				} else {
					held, err = rc.TryAcquire(ctx, key, ttl)
				}
				return err
			}
			unlock := func(ctx context.Context) error {
				err := held.Release(ctx)
				held = nil
				return err
			}
			return lock, unlock
		},
	}
}

func openRedsync(failFast bool) func(testing.TB, *redistest.Cluster) func(int) lib {
	return func(tb testing.TB, c *redistest.Cluster) func(int) lib {
		clients := nodeClients(tb, c)
		pools := make([]redsyncredis.Pool, len(clients))
		for i, cl := range clients {
			pools[i] = goredis.NewPool(cl)
		}
		rs := redsync.New(pools...)
		opts := []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(redsyncTries)}
		if failFast {
			opts = append(opts, redsync.WithFailFast(true))
		}
		unlock := func(ctx context.Context, m *redsync.Mutex) error {
			ok, err := m.UnlockContext(ctx)
			if !ok {
				return fmt.Errorf("Unlock: not released on a quorum: %w", errors.Join(err, errNotReleased))
			}
			return nil
		}
		l := lib{
			once: func(ctx context.Context, key string) error {
				m := rs.NewMutex(key, opts...)
				if err := m.TryLockContext(ctx); err != nil {
					return fmt.Errorf("TryLock: %w", err)
				}
				return unlock(ctx, m)
			},
			handle: func(key string, wait bool) (lockFunc, unlockFunc) {
				m := rs.NewMutex(key, opts...)
				lock := m.TryLockContext
				if wait {
					lock = m.LockContext
				}
				return lock, func(ctx context.Context) error { return unlock(ctx, m) }
			},
		}
		return func(int) lib { return l }
	}
}

var errNotReleased = errors.New("unlock returned false")

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sortedCopy returns ds sorted, leaving ds as it is.
func sortedCopy(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
