package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// logLines parses a JSON log stream into records.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		recs = append(recs, r)
	}
	return recs
}

// countBySource counts the records at Warn or above per source
// (component, or "worker" for the worker's own) whose message or error
// mentions s.
func countBySource(recs []map[string]any, s string) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		if lvl, _ := r["level"].(string); lvl != "WARN" && lvl != "ERROR" {
			continue
		}
		if !strings.Contains(fmt.Sprint(r), s) {
			continue
		}
		src, _ := r["component"].(string)
		if src == "" {
			src = "worker"
		}
		n[src]++
	}
	return n
}

// TestLogsStayQuietWhileANodeIsDown: one lock node of five on a closed port
// and, later, the broker down. However many times go-redis fails to dial
// the node and asynq fails to reach the broker, each source logs each
// failure once at Warn or above, the worker's own line included.
func TestLogsStayQuietWhileANodeIsDown(t *testing.T) {
	f := newFixture(t)
	dead := redistest.ClosedAddr(t)
	urls := f.nodes.URLs()
	urls[4] = "redis://" + dead
	f.cfg.RedlockNodes = urls
	f.cfg.ReadinessInterval, f.cfg.NodeCheckInterval = 50*time.Millisecond, 50*time.Millisecond
	f.cfg.LogFormat, f.cfg.LogLevel = "json", "info"
	var out workertest.Buffer
	w, err := New(f.cfg, WithLogger(newLogger(f.cfg, &out)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	// Dial the dead node many more times ourselves, beside the probes
	// (go-redis stops dialing, and logging, once a pool's dials all
	// failed; a probe in the background dials on).
	for range 30 {
		_, _ = lockadmin.PingNodes(context.Background(), w.locks)
	}
	waitFor(t, "go-redis's failed dials repeat", time.Minute, func() bool { return w.once.Dropped("go-redis") >= 5 })
	t.Logf("go-redis lines dropped as repeats: %d", w.once.Dropped("go-redis"))
	counts := countBySource(logLines(t, out.String()), dead)
	if counts["go-redis"] != 1 || counts["worker"] != 2 {
		t.Fatalf("Warn+ lines about %s per source: %v; want one from go-redis and two from the worker (node down, lock nodes degraded)\n%s", dead, counts, out.String())
	}

	if err := f.broker.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "asynq's failures repeat", 2*time.Minute, func() bool { return w.once.Dropped("asynq") >= 20 })
	recs := logLines(t, out.String())
	seen := map[string]int{}
	for _, r := range recs {
		if r["component"] == "asynq" && r["level"] != "INFO" {
			seen[fmt.Sprint(r["msg"])]++
		}
	}
	for msg, n := range seen {
		if n > 1 && !strings.Contains(msg, "-") { // per-task lines name their task
			t.Errorf("asynq logged %q %d times", msg, n)
		}
	}
	t.Logf("asynq Warn+ lines with the broker down: %v", seen)
	if len(seen) == 0 || len(seen) > 10 {
		t.Errorf("asynq's Warn+ lines with the broker down: %v", seen)
	}
	if n := countBySource(recs, "broker unreachable")["worker"]; n != 1 {
		t.Errorf("%d broker-unreachable lines, want 1", n)
	}
	if t.Failed() {
		t.Logf("log:\n%s", out.String())
	}
}
