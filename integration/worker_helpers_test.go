package integration

import (
	"github.com/asynqlock/asynqlock/internal/workertest"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/worker"
)

// In-process workers for the proofs that drive worker.Worker directly
// (proof_worker_quorum_test.go, proof_worker_input_test.go): built from
// environment-style variables like a deployed worker, served until the test
// ends.

// workerVars returns the variables of a worker on the test's broker and lock
// nodes, with an HTTP endpoint on a free loopback port; extra overrides or
// adds variables.
func workerVars(broker *redistest.Node, nodes *redistest.Cluster, extra map[string]string) map[string]string {
	vars := map[string]string{
		"ASYNQ_REDIS_URL":                    broker.URL(),
		"REDLOCK_NODES":                      strings.Join(nodes.URLs(), ","),
		"REDLOCK_NODE_TIMEOUT":               "50ms",
		"WORKER_SHUTDOWN_TIMEOUT":            "2s",
		"WORKER_TASK_CHECK_INTERVAL":         "50ms",
		"WORKER_DELAYED_TASK_CHECK_INTERVAL": "100ms",
		// An empty METRICS_ADDR would become the default :9090 (see
		// LoadConfigFrom), shared by every worker of the test.
		"METRICS_ADDR": "127.0.0.1:0",
		"LOG_LEVEL":    "error",
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars
}

// newWorker builds a worker from vars, logging nothing; register its
// handlers, then runWorker.
func newWorker(t *testing.T, vars map[string]string, opts ...worker.Option) *worker.Worker {
	t.Helper()
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(cfg, append([]worker.Option{worker.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runWorker runs w until the test ends and returns once it listens.
func runWorker(t *testing.T, w *worker.Worker) { workertest.Run(t, w) }

// readyz returns the status code of w's /readyz (0 if it did not answer).
func readyz(w *worker.Worker) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + w.Addr() + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitReadyz polls /readyz every 10ms until it answers code, at most limit,
// and returns when it first did.
func waitReadyz(t *testing.T, w *worker.Worker, code int, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := readyz(w)
		if got == code {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answered %d for %v, want %d", got, limit, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter sums the values of the counter name in w's registry over the
// series whose labels include every pair of labels.
func counter(t *testing.T, w *worker.Worker, name string, labels map[string]string) float64 {
	t.Helper()
	return metricSum(t, w, name, labels, false)
}
