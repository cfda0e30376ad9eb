package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// binary is the command under test, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "asynqlock-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "asynqlock")
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	if out, err := exec.Command(gobin, "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build asynqlock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is one run of the command.
type result struct {
	code        int
	out, errOut string
}

// cli runs the command with the given node URLs as REDLOCK_NODES (nothing
// else from the test's environment), stdin and arguments, bounded in time.
func cli(t *testing.T, urls []string, stdin string, args ...string) result {
	t.Helper()
	return cliRun(t, urls, nil, stdin, args...)
}

// cliEnv is cli with more environment variables and no stdin.
func cliEnv(t *testing.T, urls, env []string, args ...string) result {
	t.Helper()
	return cliRun(t, urls, env, "", args...)
}

func cliRun(t *testing.T, urls, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "REDLOCK_NODE_TIMEOUT=1s", "REDLOCK_TTL=10s"}
	if urls != nil {
		cmd.Env = append(cmd.Env, "REDLOCK_NODES="+strings.Join(urls, ","))
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{out: out.String(), errOut: errOut.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("asynqlock %v: %v", args, err)
	}
	t.Logf("asynqlock %s -> exit %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	return r
}

func (r result) want(t *testing.T, code int, stdout ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d", r.code, code)
	}
	for _, s := range stdout {
		if !strings.Contains(r.out, s) {
			t.Fatalf("stdout does not contain %q", s)
		}
	}
}

// holderClient is a worker's lock client over the nodes.
func holderClient(t *testing.T, urls []string) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestListAndShowNameTheHolder: list shows each held lock under the prefix
// with its holder, nodes, TTL and fence, as a table and as JSON; show gives
// one resource per node.
func TestListAndShowNameTheHolder(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	urls := nodes.URLs()
	ctx := within(t, 60*time.Second)
	c := holderClient(t, urls)
	if _, err := c.TryAcquire(redlock.ContextWithHolder(ctx, "inventory:update 42"), "sku-1", time.Minute, redlock.WithFencing()); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"sku-2", "other"} {
		if _, err := c.TryAcquire(ctx, r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("inventory:update 42 (%s pid %d)", host, os.Getpid())

	r := cli(t, urls, "", "list", "sku-")
	r.want(t, 0, "RESOURCE", "sku-1", holder, "3/3 (0,1,2)", "sku-2")
	if strings.Contains(r.out, "other") {
		t.Fatal("list sku- shows a resource outside the prefix")
	}

	r = cli(t, urls, "", "list", "--json")
	r.want(t, 0)
	var listing struct {
		Locks []lockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(r.out), &listing); err != nil {
		t.Fatal(err)
	}
	if len(listing.Locks) != 3 || listing.Locks[0].Resource != "other" || listing.Locks[1].Resource != "sku-1" {
		t.Fatalf("JSON list %+v", listing.Locks)
	}
	for _, n := range listing.Locks[1].Nodes {
		if !n.Held || n.Holder == nil || n.Holder.Name != "inventory:update 42" || n.Holder.PID != os.Getpid() ||
			n.TTLMs <= 0 || n.TTLMs > 60000 || n.Fence <= 0 || n.Addr != nodes.Nodes[n.Node].Addr() {
			t.Fatalf("JSON node state %+v", n)
		}
	}

	for _, l := range listing.Locks {
		for _, n := range l.Nodes {
			if len(n.Token) != 8 {
				t.Fatalf("JSON token %q: want its first 8 characters, as the table shows", n.Token)
			}
		}
	}

	r = cli(t, urls, "", "show", "sku-1")
	r.want(t, 0, "NODE", nodes.Nodes[2].Addr(), holder, "sku-1: held by "+holder+" on 3/3 (0,1,2), quorum 2")
	cli(t, urls, "", "show", "free-one").want(t, 0, `free-one: not held (key prefix "asynqlock:")`)
	r = cliEnv(t, urls, []string{"REDLOCK_PREFIX=wrong:"}, "list")
	r.want(t, 0, `no locks held under key prefix "wrong:" with resource prefix ""`)

	// A node down: what the others hold is listed, the failure is said.
	if err := nodes.Nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	r = cli(t, urls, "", "list", "sku-1")
	r.want(t, 1, "sku-1", holder, "2/3 (0,2)")
	if !strings.Contains(r.errOut, "1 of 3 nodes could not be scanned") || !strings.Contains(r.errOut, nodes.Nodes[1].Addr()) {
		t.Fatal("list does not say which node could not be scanned")
	}
	cli(t, urls, "", "show", "sku-1").want(t, 0, "sku-1: held by "+holder+" on 2/3 (0,2), quorum 2", nodes.Nodes[1].Addr())
}

// TestReleaseAsksAndLogs: release shows the holder and asks; anything but
// yes releases nothing; yes (or --yes) deletes the lock on every node, wakes
// a waiter, is logged at Warn, and the holder's next extension finds the
// lock lost.
func TestReleaseAsksAndLogs(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	urls := nodes.URLs()
	ctx := within(t, 60*time.Second)
	c := holderClient(t, urls)
	stuck, err := c.TryAcquire(redlock.ContextWithHolder(ctx, "job nightly"), "stuck", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	r := cli(t, urls, "n\n", "release", "stuck")
	r.want(t, 1, "held by job nightly", "[y/N]")
	if !strings.Contains(r.errOut, "not confirmed") {
		t.Fatal("a refused release does not say so")
	}
	cli(t, urls, "", "release", "stuck").want(t, 1) // no answer at all: nothing released
	if st, _ := c.Inspect(ctx, "stuck"); st[0].Token == "" || st[1].Token == "" || st[2].Token == "" {
		t.Fatalf("lock gone after a refused release: %+v", st)
	}

	waiter := holderClient(t, urls) // another process waiting for the resource
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "stuck", time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	r = cli(t, urls, "y\n", "release", "stuck")
	r.want(t, 0, "stuck: released job nightly")
	for _, s := range []string{"level=WARN", "lock force-released", "resource=stuck", "nodes_released=3"} {
		if !strings.Contains(r.errOut, s) {
			t.Fatalf("release log does not contain %q", s)
		}
	}
	if strings.Contains(r.errOut, "<nil>") {
		t.Fatalf("release log of a release that worked shows a nil error: %q", r.errOut)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never got the force-released lock")
	}
	if err := stuck.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("holder's extension after the force release: %v, want ErrLockLost", err)
	}

	if _, err := c.TryAcquire(ctx, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	cli(t, urls, "", "release", "--yes", "other").want(t, 0, "released")
	cli(t, urls, "", "show", "other").want(t, 0, "other: not held")
	r = cli(t, urls, "", "release", "--yes", "other")
	r.want(t, 1, "nothing to release")
	if !strings.Contains(r.errOut, `"other" is not held under key prefix "asynqlock:"`) {
		t.Fatal("releasing a lock nobody holds does not say so with the key prefix")
	}
}

// TestCheckFindsOneServerBehindTwoURLs: two spellings of one server
// (localhost and 127.0.0.1; two databases) are caught by run_id and named;
// an evicting node is warned about with what to change; distinct nodes pass.
func TestCheckFindsOneServerBehindTwoURLs(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	ctx := within(t, 60*time.Second)
	lru := nodes.Nodes[2].Client(t)
	if err := lru.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lru.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	a := nodes.Nodes[0].Addr()
	_, port, _ := strings.Cut(a, ":")
	for _, tc := range []struct{ name, url0, url1 string }{
		{"localhost", "redis://" + a, "redis://localhost:" + port},
		{"databases", "redis://" + a + "/0", "redis://" + a + "/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			urls := []string{tc.url0, tc.url1, nodes.Nodes[2].URL()}
			r := cli(t, urls, "", "check")
			r.want(t, 1, "error: redlock: two lock nodes are one server: node 0 ("+tc.url0+") and node 1 ("+tc.url1+")", "give each lock node its own redis-server")
			r = cli(t, urls, "", "check", "--json")
			r.want(t, 1, `"same_server": [`)
			var out struct {
				SameServer [][]int `json:"same_server"`
			}
			if err := json.Unmarshal([]byte(r.out), &out); err != nil {
				t.Fatal(err)
			}
			if len(out.SameServer) != 1 || len(out.SameServer[0]) != 2 || out.SameServer[0][0] != 0 || out.SameServer[0][1] != 1 {
				t.Fatalf("same_server %v, want [[0 1]]", out.SameServer)
			}
		})
	}

	r := cli(t, nodes.URLs(), "", "check")
	r.want(t, 1, "maxmemory-policy allkeys-lru can evict lock keys: set maxmemory-policy noeviction", "after a crash keep the node down")
	if strings.Contains(r.out, "one server") || !strings.Contains(r.errOut, "node 2 ("+nodes.Nodes[2].Addr()+"): maxmemory-policy allkeys-lru") {
		t.Fatal("distinct nodes reported as one server, or the evicting node not named as the failure")
	}
	if err := lru.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// Persistence without fsync always is a note (the delayed-restart
	// rule), not a problem; --nodes stands in for REDLOCK_NODES.
	cli(t, nil, "", "check", "--nodes", strings.Join(nodes.URLs(), ",")).want(t, 0, "after a crash keep the node down")

	if err := nodes.Nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	r = cli(t, nodes.URLs(), "", "check")
	r.want(t, 1, "DOWN")
	if !strings.Contains(r.errOut, "1 of 3 nodes unreachable") {
		t.Fatal("check does not say how many nodes are down")
	}
}

// TestConfigAndUsageErrors: the command needs REDLOCK_NODES (not the
// broker's URL) and says what is wrong; bad usage exits 2.
func TestConfigAndUsageErrors(t *testing.T) {
	r := cli(t, nil, "", "list")
	if r.code != 2 || !strings.Contains(r.errOut, "REDLOCK_NODES") || strings.Contains(r.errOut, "ASYNQ_REDIS_URL") {
		t.Fatalf("no REDLOCK_NODES: exit %d, stderr %q", r.code, r.errOut)
	}
	r = cli(t, []string{"redis://:s3cret@bad host:1"}, "", "list")
	if r.code != 2 || strings.Contains(r.errOut, "s3cret") {
		t.Fatalf("bad URL: exit %d, stderr %q (password must not show)", r.code, r.errOut)
	}
	urls := []string{"redis://127.0.0.1:1"}
	cli(t, urls, "", "frobnicate").want(t, 2)
	cli(t, urls, "", "show").want(t, 2)
	cli(t, urls, "", "list", "--limit", "0").want(t, 2)
	cli(t, urls, "", "--help").want(t, 0, "usage: asynqlock")
}

// TestDependencyLinesAreJSONAndOnce: with LOG_FORMAT=json every line the
// command writes to stderr is JSON, go-redis's included, and go-redis's
// failed dials to a node on a closed port are one line at Debug however many
// calls the command makes to it; at the default level they are none, the
// command's own line naming the node.
func TestDependencyLinesAreJSONAndOnce(t *testing.T) {
	nodes := redistest.StartCluster(t, 2)
	dead := redistest.ClosedAddr(t)
	urls := append(nodes.URLs(), "redis://"+dead)
	c := holderClient(t, nodes.URLs())
	for i := range 20 {
		if _, err := c.TryAcquire(within(t, 30*time.Second), fmt.Sprintf("r-%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// At the default level none: the command reports the node itself.
	r := cliEnv(t, urls, []string{"LOG_FORMAT=json"}, "list")
	if r.code != 1 || !strings.Contains(r.out, "r-19") {
		t.Fatalf("list with a node down: exit %d", r.code)
	}
	if strings.Contains(r.errOut, `"component":"go-redis"`) || !strings.Contains(r.errOut, "not scanned") || !strings.Contains(r.errOut, dead) {
		t.Fatalf("list with a node down at the default level: stderr %q; want the command's own line naming %s, none of go-redis's", r.errOut, dead)
	}
	r = cliEnv(t, urls, []string{"LOG_FORMAT=json", "LOG_LEVEL=debug"}, "list")
	if r.code != 1 || !strings.Contains(r.out, "r-19") {
		t.Fatalf("list with a node down: exit %d", r.code)
	}
	dials := 0
	for line := range strings.Lines(r.errOut) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			if strings.HasPrefix(line, "asynqlock list: ") {
				continue // the command's own verdict
			}
			t.Fatalf("stderr line is not JSON: %q", line)
		}
		if rec["component"] == "go-redis" && strings.Contains(fmt.Sprint(rec["msg"]), dead) {
			dials++
		}
	}
	if dials != 1 {
		t.Fatalf("%d go-redis lines about %s, want 1", dials, dead)
	}
}

// TestListAndShowSlots: a resource used WithLimit shows each held slot, on
// the nodes counted once.
func TestListAndShowSlots(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	urls := nodes.URLs()
	ctx := within(t, 60*time.Second)
	c := holderClient(t, urls)
	var slots []int
	for range 2 {
		l, err := c.TryAcquire(redlock.ContextWithHolder(ctx, "import"), "tenant-7", time.Minute, redlock.WithLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, l.Slot())
	}
	r := cli(t, urls, "", "list")
	want := []string{"RESOURCE", "3/3 (0,1,2)"}
	for _, s := range slots {
		want = append(want, fmt.Sprintf("tenant-7 (slot %d)", s))
	}
	r.want(t, 0, want...)
	r = cli(t, urls, "", "show", "tenant-7")
	r.want(t, 0, fmt.Sprintf("0 (slot %d)", slots[0]), fmt.Sprintf("(slot %d) on 3/3", slots[1]))
}
