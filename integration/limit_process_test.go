package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// The multi-process limit test: worker processes (this test binary run
// again with limitWorkerEnv set, see TestMain) take one resource
// WithLimit(n) from goroutines of their own, and count themselves in and
// out on an observer Redis, atomically: the observer sees how many hold the
// resource at once across processes, and each slot's holders.

// limitWorkerEnv names the environment variable holding a limit worker's
// configuration.
const limitWorkerEnv = "ASYNQLOCK_LIMIT_WORKER"

// limitWorkerConfig is what a limit worker does.
type limitWorkerConfig struct {
	Nodes    []string `json:"nodes"`
	Observer string   `json:"observer"` // address of the observer Redis
	Limit    int      `json:"limit"`
	Workers  int      `json:"workers"` // goroutines
	Ops      int      `json:"ops"`     // acquisitions per goroutine
	Seed     uint64   `json:"seed"`
}

// enterLua counts a holder of slot ARGV[1] in: the holders now, the peak,
// and a breach when the slot already had a holder.
const enterLua = `local n = redis.call('INCR', 'inside')
if n > tonumber(redis.call('GET', 'peak') or '0') then redis.call('SET', 'peak', n) end
if redis.call('INCR', 'slot:' .. ARGV[1]) > 1 then redis.call('INCR', 'breach') end
return n`

// leaveLua counts the holder of slot ARGV[1] out, and one acquisition done.
const leaveLua = `redis.call('DECR', 'inside')
redis.call('DECR', 'slot:' .. ARGV[1])
return redis.call('INCR', 'ops')`

// limitWorkerMain runs a limit worker; its exit status is 0 on success.
func limitWorkerMain(raw string) int {
	var cfg limitWorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "limit worker config:", err)
		return 2
	}
	locks, err := redlock.NewFromURLs(cfg.Nodes, redlock.WithNodeTimeout(time.Second), redlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer locks.Close()
	obs := redis.NewClient(&redis.Options{Addr: cfg.Observer})
	defer obs.Close()
	errs := make(chan error, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { errs <- limitWorkerLoop(locks, obs, cfg, rand.New(rand.NewPCG(cfg.Seed, uint64(w)))) })
	}
	wg.Wait()
	close(errs)
	status := 0
	for err := range errs {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			status = 1
		}
	}
	return status
}

// limitWorkerLoop makes one goroutine's acquisitions.
func limitWorkerLoop(locks *redlock.Client, obs *redis.Client, cfg limitWorkerConfig, rng *rand.Rand) error {
	for range cfg.Ops {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := locks.Acquire(ctx, "tenant", 5*time.Second, redlock.WithLimit(cfg.Limit))
		cancel()
		if err != nil {
			return err
		}
		slot := strconv.Itoa(l.Slot())
		if err := obs.Eval(context.Background(), enterLua, nil, slot).Err(); err != nil {
			return err
		}
		time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Microsecond)
		if err := obs.Eval(context.Background(), leaveLua, nil, slot).Err(); err != nil {
			return err
		}
		if err := l.Release(context.Background()); err != nil && !errors.Is(err, redlock.ErrQuorum) {
			return err
		}
	}
	return nil
}

// TestLimitAcrossProcessesWithANodeKilled: three processes of four
// goroutines each share a resource WithLimit(3) on five redis-server nodes,
// one of them killed a third of the way: the observer never sees more than
// 3 holders at once, nor two on one slot, and sees 3 at once.
func TestLimitAcrossProcessesWithANodeKilled(t *testing.T) {
	const procs, workers, ops, n = 3, 4, 60, 3
	nodes := redistest.StartCluster(t, 5)
	observer := redistest.StartNode(t)
	obs := observer.Client(t)
	var cmds []*exec.Cmd
	var stderr []*bytes.Buffer
	for p := range procs {
		raw, _ := json.Marshal(limitWorkerConfig{Nodes: nodes.URLs(), Observer: observer.Addr(), Limit: n, Workers: workers, Ops: ops, Seed: uint64(p)})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), limitWorkerEnv+"="+string(raw))
		var buf bytes.Buffer
		cmd.Stderr = &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() }) // a no-op once it exited
		cmds, stderr = append(cmds, cmd), append(stderr, &buf)
	}
	const total = procs * workers * ops
	waitFor(t, "a third of the acquisitions", func() bool {
		done, _ := obs.Get(context.Background(), "ops").Int()
		return done >= total/3
	})
	if err := nodes.Nodes[4].Kill(); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if err := waitProcess(cmd, 2*time.Minute); err != nil {
			t.Fatalf("worker process %d: %v\n%s", i, err, stderr[i])
		}
	}
	get := func(k string) int { v, _ := obs.Get(context.Background(), k).Int(); return v }
	if done, peak, breach := get("ops"), get("peak"), get("breach"); done != total || peak > n || breach != 0 {
		t.Fatalf("%d of %d acquisitions, peak %d holders (at most %d), %d slots held twice", done, total, peak, n, breach)
	}
	// Control: the bound is not kept by holding fewer (how often n
	// overlapped depends on the machine's load).
	holdEverySlot(t, urlLockClient(t, nodes), urlLockClient(t, nodes), "tenant", n)
}

// waitProcess waits for cmd to exit, at most limit.
func waitProcess(cmd *exec.Cmd, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		return fmt.Errorf("still running after %v", limit)
	}
}
