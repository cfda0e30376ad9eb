package worker

import (
	"bytes"
	"log"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// TestQueueMetricsOnlyWithMetrics: asynq's queue metrics collector, which
// queries the broker and writes "Failed to collect metrics data" with the
// log package when that fails, is not started with METRICS_ADDR=off; with
// an endpoint it is (the control: registering it queries the broker once,
// which here refuses the worker).
func TestQueueMetricsOnlyWithMetrics(t *testing.T) {
	broker := redistest.StartServer(t, redistest.WithPassword("pw")) // NOAUTH to the worker
	var buf bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	for _, addr := range []string{"off", "127.0.0.1:0"} {
		buf.Reset()
		cfg, err := LoadConfigFrom(map[string]string{
			"ASYNQ_REDIS_URL": "redis://" + broker.Addr(),
			"REDLOCK_NODES":   "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3",
			"METRICS_ADDR":    addr,
		})
		if err != nil {
			t.Fatal(err)
		}
		w, err := New(cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		got := strings.Contains(buf.String(), "Failed to collect metrics data")
		if want := addr != "off"; got != want {
			t.Errorf("METRICS_ADDR=%s: queue metrics collected: %v, want %v (log: %q)", addr, got, want, buf.String())
		}
	}
}
