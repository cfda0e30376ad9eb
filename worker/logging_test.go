package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
)

// With LOG_FORMAT=json, durations read "1.5s" and go-redis's lines are JSON
// records at a level that matches what they report.
func TestJSONLogsReadableDurationsAndGoRedisLines(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(Config{LogFormat: "json", LogLevel: "info"}, &buf)
	l.Info("worker shutting down", "timeout", 1500*time.Millisecond)
	r := workerconfig.RedisLog{L: workerconfig.NewOnce(0).Logger(l, "go-redis")}
	r.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 1, "connection refused")
	r.Printf(context.Background(), "sentinel: selected addr=%s", "127.0.0.1:1")
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 || recs[0]["timeout"] != "1.5s" {
		t.Fatalf("records %v, want the duration as \"1.5s\"", recs)
	}
	if recs[1]["component"] != "go-redis" || recs[1]["level"] != "WARN" || recs[2]["level"] != "INFO" {
		t.Fatalf("go-redis records %v, want a WARN failure and an INFO selection", recs[1:])
	}
}
