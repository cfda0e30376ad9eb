package deploy

import (
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/worker"
)

// newWorker builds a worker from vars with its broker and lock nodes
// replaced by local redis-servers (n lock nodes) and its endpoint on a free
// loopback port.
func newWorker(t *testing.T, vars map[string]string, n int) *worker.Worker {
	t.Helper()
	nodes := redistest.StartCluster(t, n+1)
	vars = maps.Clone(vars)
	vars["ASYNQ_REDIS_URL"] = nodes.Nodes[0].URL()
	vars["REDLOCK_NODES"] = strings.Join(nodes.URLs()[1:], ",")
	vars["METRICS_ADDR"] = "127.0.0.1:0"
	vars["LOG_LEVEL"] = "error"
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(cfg, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// startWorker is newWorker, run until the test ends.
func startWorker(t *testing.T, vars map[string]string, n int) *worker.Worker {
	t.Helper()
	w := newWorker(t, vars, n)
	workertest.Run(t, w)
	return w
}

// waitHTTP waits until url answers code, at most limit.
func waitHTTP(t *testing.T, url string, code int, limit time.Duration) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if got = resp.StatusCode; got == code {
			return
		}
	}
	t.Fatalf("%s answered %d, not %d, within %v", url, got, code, limit)
}
