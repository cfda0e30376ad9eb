package middleware

import (
	"context"
	"fmt"
	"github.com/asynqlock/asynqlock/redlock"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// idleEntries returns how many resources m keeps and how many idle ones
// wait in its FIFO.
func (m *mw) idleEntries() (kept, queued int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.res), len(m.idle) - m.idleHead
}

// contended notes that a task of this process met res busy.
func (m *mw) contended(res string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	e.contention(time.Now())
	m.touched(res, e)
}

// runUncontended walks res through what one uncontended task does to the
// state: a holder starts, promotes on start, ends, promotes after.
func (m *mw) runUncontended(res string) {
	e, _ := m.countHolder(res, "q", "id")
	m.ended(res, e, "q", time.Now().Add(-time.Millisecond))
}

// TestHundredThousandResourcesLeaveNothingBehind: uncontended resources
// leave no state at all; contended ones are kept idleKeep, then dropped by
// later traffic, without a scan; a broker configured changes nothing for
// resources that met no contention (no promotion state either).
func TestHundredThousandResourcesLeaveNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		m := newMW(nil, nil, cfg)
		const n = 100_000
		for i := range n {
			m.runUncontended(fmt.Sprintf("task:t:SKU-%d", i))
		}
		if kept, queued := m.idleEntries(); kept != 0 || queued != 0 {
			t.Fatalf("after %d uncontended resources: %d entries kept, %d queued", n, kept, queued)
		}
		for i := range n {
			res := fmt.Sprintf("task:t:HOT-%d", i)
			w := m.forceWait(res)
			m.delay(res)
			m.leaveWait(res, w, false)
		}
		if kept, _ := m.idleEntries(); kept != n {
			t.Fatalf("%d contended resources kept right after, want %d (their pace matters)", kept, n)
		}
		time.Sleep(2 * idleKeep)
		for i := range n / expirePerCall {
			m.runUncontended(fmt.Sprintf("task:t:LATER-%d", i))
		}
		if kept, queued := m.idleEntries(); kept != 0 || queued != 0 {
			t.Fatalf("after idleKeep and more traffic: %d entries kept, %d queued", kept, queued)
		}
	})
}

// TestTasksOnDistinctKeysLeaveNoState: through the middleware with a broker
// (as worker.New configures it), tasks on distinct keys leave no per-resource
// state and make no promotion call.
func TestTasksOnDistinctKeysLeaveNoState(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
	broker := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	t.Cleanup(func() { _ = broker.Close() })
	calls := &brokerCalls{}
	broker.AddHook(calls)
	cfg := defaultConfig()
	WithBroker(broker)(&cfg)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	// Not a test of timing: a node timeout no loaded machine misses.
	locks, err := redlock.NewFromURLs([]string{e.srv.URL()}, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	m := newMW(locks, ByField("sku"), cfg)
	// The queue's archive sweep (a pass a minute, not per task; sweep_test.go)
	// is taken as running already.
	k := sweepKey{broker, "default"}
	sweeps.Store(k, &sweep{})
	t.Cleanup(func() { sweeps.Delete(k) })
	rec := &recorder{}
	for i := range 300 {
		if err := m.process(ctx, task("stock:adjust", fmt.Sprintf(`{"sku":"S-%d"}`, i)), rec); err != nil {
			t.Fatal(err)
		}
	}
	// The last tasks' releases may still be answered (Lock.ReleaseAsync):
	// their entries go once they are.
	waitFor(t, "no entry kept nor queued after 300 tasks on distinct keys", func() bool {
		kept, queued := m.idleEntries()
		return kept == 0 && queued == 0
	})
	time.Sleep(50 * time.Millisecond) // a promotion call would run in the background
	if n := calls.n.Load(); n != 0 {
		t.Fatalf("%d broker commands for uncontended tasks, want 0", n)
	}
}

// brokerCalls counts the commands a broker client sends.
type brokerCalls struct{ n atomic.Int64 }

func (c *brokerCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *brokerCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *brokerCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
