package readme

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// TestReadmeSnippetsAreThisCode: every ```go block of README.md is a snippet
// of snippets_test.go (between its README:begin and README:end comments,
// less the function's indentation)
// and every snippet is in the README: what the README shows is what the
// tests below compile and run.
func TestReadmeSnippetsAreThisCode(t *testing.T) {
	readme := readFile(t, "../../README.md")
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readme, -1)
	snippets := regions(t, readFile(t, "snippets_test.go"))

	used := map[string]bool{}
	for i, b := range blocks {
		name := ""
		for n, s := range snippets {
			if s == b[1] {
				name = n
			}
		}
		if name == "" {
			t.Errorf("README's Go block %d is not a snippet of snippets_test.go (update one to match the other):\n%s", i+1, b[1])
			continue
		}
		used[name] = true
	}
	for n, s := range snippets {
		if !used[n] {
			t.Errorf("snippet %q is not in the README:\n%s", n, s)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// regions returns the named snippets of src, each dedented by its first
// line's indentation, as the README shows them.
func regions(t *testing.T, src string) map[string]string {
	t.Helper()
	out := map[string]string{}
	re := regexp.MustCompile(`(?s)\n(\t*)// README:begin (\w+)\n(.*?)\n\t*// README:end\n`)
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		indent, name, body := m[1], m[2], m[3]
		var b strings.Builder
		for _, line := range strings.Split(body, "\n") {
			b.WriteString(strings.TrimPrefix(line, indent) + "\n")
		}
		out[name] = b.String()
	}
	if len(out) == 0 {
		t.Fatal("no README:begin ... README:end snippet found")
	}
	return out
}

// servers starts three embedded lock nodes and an embedded broker, and sets
// REDLOCK_NODES as the snippets read it.
func servers(t *testing.T) (nodes []string, broker string) {
	t.Helper()
	urls, stop, err := redlocktest.StartNodes(4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Setenv("REDLOCK_NODES", strings.Join(urls[:3], ","))
	return urls[:3], urls[3]
}

// lockClient returns a lock client on nodes with a node timeout generous
// for a loaded machine (these tests are about the snippets, not speed).
func lockClient(t *testing.T, nodes []string) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs(nodes, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// captureStdout returns what f printed on os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	var out []byte
	done := make(chan struct{})
	go func() { out, _ = io.ReadAll(r); close(done) }()
	func() {
		os.Stdout = w
		defer func() { os.Stdout = saved; _ = w.Close() }()
		f()
	}()
	<-done
	return string(out)
}

// TestReadmeDecorate runs the middleware snippet's server on one task: the
// handler runs under a fenced lock on the task's order SKU.
func TestReadmeDecorate(t *testing.T) {
	_, broker := servers(t)
	opt, err := redis.ParseURL(broker)
	if err != nil {
		t.Fatal(err)
	}
	redisOpt := asynq.RedisClientOpt{Addr: opt.Addr}
	rollback := func(context.Context, *asynq.Task, error) error { return nil }

	srv, mux, brokerRedis := decorate(redisOpt, rollback)
	t.Cleanup(func() { _ = brokerRedis.Close() })
	got := make(chan middleware.LockInfo, 1)
	mux.HandleFunc("order:ship", func(ctx context.Context, _ *asynq.Task) error {
		lock, _ := middleware.LockFromContext(ctx)
		got <- lock
		return nil
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	enq := asynq.NewClient(redisOpt)
	t.Cleanup(func() { _ = enq.Close() })
	payload, _ := json.Marshal(map[string]any{"order": map[string]string{"sku": "A-1"}})
	if _, err := enq.Enqueue(asynq.NewTask("order:ship", payload)); err != nil {
		t.Fatal(err)
	}
	select {
	case lock := <-got:
		if lock.Fence <= 0 || !strings.HasSuffix(lock.Resource, "A-1") {
			t.Errorf("handler's lock %+v: want a fenced lock on A-1", lock)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the task did not run within 2 minutes")
	}
}

// TestReadmeCron runs the robfig/cron snippet until its job ran once (the
// next whole 10 seconds).
func TestReadmeCron(t *testing.T) {
	nodes, _ := servers(t)
	ran := make(chan struct{}, 10)
	c := cronSingleton(lockClient(t, nodes), cron.FuncJob(func() { ran <- struct{}{} }))
	defer func() { <-c.Stop().Done() }()
	select {
	case <-ran:
	case <-time.After(2 * time.Minute):
		t.Fatal("the cron job did not run within 2 minutes")
	}
}

// TestReadmeScheduler runs the Scheduler snippet: both jobs are registered
// (the snippet prints a line per entry) and it stops cleanly.
func TestReadmeScheduler(t *testing.T) {
	nodes, broker := servers(t)
	opt, err := asynq.ParseRedisURI(broker)
	if err != nil {
		t.Fatal(err)
	}
	enq := asynq.NewClient(opt)
	t.Cleanup(func() { _ = enq.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := captureStdout(t, func() {
		schedule(ctx, lockClient(t, nodes), enq, func(context.Context) error { return nil })
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0]+lines[1], "nightly-report") || !strings.Contains(out, "\nsync-prices") {
		t.Errorf("the snippet printed %q; want a line for nightly-report and one for sync-prices", out)
	}
}

// TestReadmeRedlock runs the redlock snippet while another client holds
// "report" for a moment: Run adjusts the SKU, TryAcquire meets the holder
// and Acquire waits for its release (or, on a machine slow enough that the
// holder let go first, TryAcquire takes it: either way the snippet must
// succeed), and the write carries a fence larger than the holder's.
func TestReadmeRedlock(t *testing.T) {
	nodes, _ := servers(t)
	locks, other := lockClient(t, nodes), lockClient(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, err := other.Acquire(ctx, "report", 30*time.Second, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond)
		_ = held.Release(context.Background())
	})

	var adjusted []string
	adjust := func(ctx context.Context, sku string, delta int) error {
		adjusted = append(adjusted, sku)
		return ctx.Err()
	}
	st := &store{}
	if err := perResource(ctx, locks, adjust, st, "report #1"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(adjusted, []string{"A-100"}) {
		t.Errorf("adjusted %v, want [A-100]", adjusted)
	}
	if !slices.Equal(st.records, []string{"report #1"}) || st.fence <= held.Fence() {
		t.Errorf("store has %v at fence %d; want the record at a fence above the holder's %d", st.records, st.fence, held.Fence())
	}
	// The lock was released on return: the next one gets it at once.
	l, err := locks.TryAcquire(ctx, "report", 10*time.Second)
	if err != nil {
		t.Fatalf("report still held after the snippet returned: %v", err)
	}
	_ = l.Release(ctx)
	if err := st.Write(ctx, held.Fence(), "late"); !errors.Is(err, errStaleFence) {
		t.Errorf("a write with the earlier holder's fence: %v; want it rejected", err)
	}
}

// TestReadmeLimits runs the Limits snippet: its handlers register, and it
// holds and releases one of the provider's slots.
func TestReadmeLimits(t *testing.T) {
	nodes, _ := servers(t)
	locks := lockClient(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mux := asynq.NewServeMux()
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	var runErr error
	out := captureStdout(t, func() { runErr = limits(ctx, locks, mux, noop, noop) })
	if runErr != nil || !strings.HasPrefix(out, "holding slot ") {
		t.Fatalf("printed %q, err %v", out, runErr)
	}
	for _, typ := range []string{"tenant:import", "payment:charge"} {
		if _, pattern := mux.Handler(asynq.NewTask(typ, nil)); pattern != typ {
			t.Errorf("no handler for %s", typ)
		}
	}
	if _, err := locks.TryAcquire(ctx, "payment-provider", 10*time.Second, redlock.WithLimit(10)); err != nil {
		t.Errorf("the slot was not released: %v", err)
	}
}
