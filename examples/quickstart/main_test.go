package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
)

// runMainEnv makes the test binary run main instead of the tests: the quick
// start is tested as the process an orchestrator runs.
const runMainEnv = "QUICKSTART_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startMain runs main in a child process with env added to the test's.
func startMain(t *testing.T, env ...string) (*exec.Cmd, *workertest.Buffer, chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	stderr := &workertest.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd, stderr, done
}

func exitCode(t *testing.T, done chan error, stderr *workertest.Buffer) int {
	t.Helper()
	select {
	case err := <-done:
		done <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatalf("the process did not exit within 60s; stderr:\n%s", stderr)
		return -1
	}
}

// records parses stderr: every line must be a JSON object.
func records(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		out = append(out, rec)
	}
	return out
}

func find(recs []map[string]any, key, value string) map[string]any {
	for _, r := range recs {
		if s, _ := r[key].(string); strings.HasPrefix(s, value) {
			return r
		}
	}
	return nil
}

// TestSIGTERMExitsZeroWithOneJSONLogStream: a worker asked to stop exits 0,
// and with LOG_FORMAT=json every line it wrote is JSON, asynq's and
// go-redis's included, with readable durations.
func TestSIGTERMExitsZeroWithOneJSONLogStream(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	dead := redistest.ClosedAddr(t) // a lock node down from the start: go-redis logs its failed dials
	cmd, stderr, done := startMain(t,
		"ASYNQ_REDIS_URL="+cl.Nodes[0].URL(),
		"REDLOCK_NODES="+cl.Nodes[1].URL()+","+cl.Nodes[2].URL()+",redis://"+dead,
		"REDLOCK_NODE_TIMEOUT=500ms", "METRICS_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "WORKER_SHUTDOWN_TIMEOUT=2s")
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs := records(t, stderr.String())
		if find(recs, "msg", "worker started") != nil && find(recs, "component", "go-redis") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start and go-redis line within 60s; stderr:\n%s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, done, stderr); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, stderr)
	}
	recs := records(t, stderr.String())
	if r := find(recs, "msg", "lock node unreachable"); r == nil || r["level"] != "WARN" || r["addr"] != dead {
		t.Errorf("the dead node is not named at Warn: %v", r)
	}
	if find(recs, "component", "asynq") == nil {
		t.Error("no asynq line in the stream")
	}
	if r := find(recs, "msg", "worker shutting down"); r == nil || r["timeout"] != "2s" {
		t.Errorf("shutdown timeout not readable: %v", r)
	}
	if find(recs, "msg", "worker stopped") == nil {
		t.Errorf("no clean stop logged; stderr:\n%s", stderr)
	}
}

// TestBadConfigurationExitsOne: a worker that cannot start exits 1 and says
// which variable is wrong.
func TestBadConfigurationExitsOne(t *testing.T) {
	_, stderr, done := startMain(t, "ASYNQ_REDIS_URL=redis://127.0.0.1:6379", "REDLOCK_NODES=127.0.0.1:6380")
	if code := exitCode(t, done, stderr); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	if s := stderr.String(); !strings.Contains(s, "REDLOCK_NODES: node 0: URL has no scheme") {
		t.Fatalf("stderr does not name the problem:\n%s", s)
	}
}
