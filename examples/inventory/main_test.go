package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets a test run the demo's main as a process of its own (the test
// binary re-executed with demoAsMain set), so that its whole output is seen
// as a user sees it: every source of log lines included.
func TestMain(m *testing.M) {
	if os.Getenv(demoAsMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const demoAsMain = "INVENTORY_DEMO_AS_MAIN"

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// demoConfig is a smaller run than the default, logging at Warn (as main
// does) into logs.
func demoConfig(noLock bool, logs *syncBuffer) config {
	c := defaults()
	c.noLock, c.updates, c.skus, c.hot, c.concurrency = noLock, 400, 8, 0.3, 6
	c.logs = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return c
}

func clearEnv(t *testing.T) {
	for _, v := range []string{"REDLOCK_NODES", "ASYNQ_REDIS_URL", "INVENTORY_STORE_URL"} {
		t.Setenv(v, "")
	}
}

// TestDemoLosesNoUpdateWithLocks runs the demo as a user would (embedded
// servers, three worker replicas): every SKU ends at its expected stock, and
// nothing is logged at Warn or above: the demo has no warning about its own
// setup (embedded nodes of unknown settings, releases or probes timed out by
// a loaded machine).
func TestDemoLosesNoUpdateWithLocks(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	var logs syncBuffer
	res, err := run(context.Background(), demoConfig(false, &logs), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.lost != 0 || res.skusOff != 0 {
		t.Fatalf("%d units lost on %d SKUs with locks:\n%s", res.lost, res.skusOff, out.String())
	}
	for _, want := range []string{"5 embedded in-process lock nodes", "embedded in-process asynq broker", "SKU-HOT", "0 SKUs wrong, 0 stock units lost"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "lost than") {
		t.Errorf("a SKU explained as off in a run with locks:\n%s", out.String())
	}
	if logs.String() != "" {
		t.Errorf("the demo logged at Warn or above:\n%s", logs.String())
	}
}

// TestDemoShowsLostUpdatesWithoutLocks: the same run without locks loses
// updates, so the demo's check is known to be able to fail; the table
// explains why some SKUs end above their expected stock.
func TestDemoShowsLostUpdatesWithoutLocks(t *testing.T) {
	clearEnv(t)
	var logs syncBuffer
	cfg := demoConfig(true, &logs)
	cfg.work = 2 * time.Millisecond
	var out bytes.Buffer
	res, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.lost == 0 {
		t.Fatal("no update lost without locks: the demo cannot show what the lock prevents")
	}
	s := out.String()
	if strings.Contains(s, "more decrements lost") && !strings.Contains(s, "ends above its\nexpected stock") {
		t.Errorf("SKUs above their expected stock, not explained:\n%s", s)
	}
	if !strings.Contains(s, "WITHOUT locks") || !strings.Contains(s, "nothing was gained") {
		t.Errorf("output lacks the explanation of lost updates:\n%s", s)
	}
	if logs.String() != "" {
		t.Errorf("the demo logged at Warn or above:\n%s", logs.String())
	}
}

// TestDemoProcessPrintsNoWarning runs main as a process, as `go run
// ./examples/inventory` does (smaller: 400 adjustments): it exits 0, says 0
// units lost, and writes nothing to stderr, where every log line of the
// process goes (the demo's, asynq's and go-redis's).
func TestDemoProcessPrintsNoWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo as a process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-updates", "400", "-skus", "8", "-concurrency", "6")
	cmd.Env = append(os.Environ(), demoAsMain+"=1", "REDLOCK_NODES=", "ASYNQ_REDIS_URL=", "INVENTORY_STORE_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "0 SKUs wrong, 0 stock units lost") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("the demo wrote to stderr (warnings or errors):\n%s", stderr.String())
	}
	if strings.Contains(stdout.String(), "level=") {
		t.Errorf("log lines on stdout:\n%s", stdout.String())
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	c := defaults()
	c.replicas, c.skus, c.updates, c.hot = 0, 1, 0, 2
	err := c.validate()
	for _, want := range []string{"-replicas", "-skus", "-updates", "-hot"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}
