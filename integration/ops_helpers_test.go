package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// An operator's view of an in-process worker (ops_*_test.go): its JSON log
// stream, its /readyz and a task type that proves tasks flow end to end.

const opsTask = "ops:echo"

type opsWorker struct {
	w    *worker.Worker
	logs *workertest.Buffer
	done chan string // payloads of processed tasks
}

// opsVars are a worker's variables with a patient node timeout (TLS
// handshakes on a loaded machine) and a local HTTP endpoint.
func opsVars(broker string, nodes []string, extra map[string]string) map[string]string {
	vars := map[string]string{
		"ASYNQ_REDIS_URL":            broker,
		"REDLOCK_NODES":              strings.Join(nodes, ","),
		"REDLOCK_NODE_TIMEOUT":       "1s",
		"WORKER_SHUTDOWN_TIMEOUT":    "2s",
		"WORKER_TASK_CHECK_INTERVAL": "50ms",
		"METRICS_ADDR":               "127.0.0.1:0",
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars
}

// newOpsWorker builds a worker from vars logging JSON at Info into a buffer;
// start it with run.
func newOpsWorker(t *testing.T, vars map[string]string) *opsWorker {
	t.Helper()
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReadinessInterval = 200 * time.Millisecond
	o := &opsWorker{logs: &workertest.Buffer{}, done: make(chan string, 16)}
	log := slog.New(slog.NewJSONHandler(o.logs, nil))
	o.w, err = worker.New(cfg, worker.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	err = o.w.Handle(opsTask, asynq.HandlerFunc(func(_ context.Context, tk *asynq.Task) error {
		o.done <- string(tk.Payload())
		return nil
	}), middleware.ByField("id"))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *opsWorker) run(t *testing.T) { workertest.Run(t, o.w) }

// roundTrip enqueues a task through the worker's broker client and waits
// until the worker ran it under its lock.
func (o *opsWorker) roundTrip(t *testing.T, id string) {
	t.Helper()
	payload := `{"id":"` + id + `"}`
	if _, err := o.w.Client().Enqueue(asynq.NewTask(opsTask, []byte(payload))); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	select {
	case got := <-o.done:
		if got != payload {
			t.Fatalf("processed %s, want %s", got, payload)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("task %s not processed within 30s; log:\n%s", id, o.logs)
	}
}

// records parses the log stream: every line must be one JSON object.
func (o *opsWorker) records(t *testing.T) []map[string]any {
	t.Helper()
	return jsonRecords(t, strings.NewReader(o.logs.String()))
}

func jsonRecords(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

// waitRecord waits, at most limit, for a record whose message starts with msg, at level
// whose attributes contain every pair of attrs (values compared as text).
func (o *opsWorker) waitRecord(t *testing.T, level, msg string, attrs map[string]string, limit time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if recs := matching(o.records(t), level, msg, attrs); len(recs) > 0 {
			return recs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s record %q with %v within %v; log:\n%s", level, msg, attrs, limit, o.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func matching(recs []map[string]any, level, msg string, attrs map[string]string) []map[string]any {
	var out []map[string]any
next:
	for _, r := range recs {
		if m, _ := r["msg"].(string); r["level"] != level || !strings.HasPrefix(m, msg) {
			continue
		}
		for k, v := range attrs {
			if !strings.Contains(fmt.Sprint(r[k]), v) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// readyzBody returns /readyz's status and body.
func (o *opsWorker) readyzBody(t *testing.T) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + o.w.Addr() + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyzBody polls /readyz until its status is code and its body holds
// every one of want, at most limit.
func (o *opsWorker) waitReadyzBody(t *testing.T, code int, limit time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, body := o.readyzBody(t)
		ok := got == code
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q after %v, want %d with %q; log:\n%s", got, body, limit, code, want, o.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noSecret fails if s shows any of the secrets.
func noSecret(t *testing.T, what, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Fatalf("%s shows the secret %q:\n%s", what, sec, s)
		}
	}
}

// gauge returns the value of the gauge name in w's registry, summed over
// the series whose labels include every pair of labels.
func gauge(t *testing.T, w *worker.Worker, name string, labels map[string]string) float64 {
	t.Helper()
	return metricSum(t, w, name, labels, true)
}

// metricSum sums the gauge (or counter) values of the series of the metric
// name in w's registry whose labels include every pair of labels.
func metricSum(t *testing.T, w *worker.Worker, name string, labels map[string]string, isGauge bool) float64 {
	t.Helper()
	mfs, err := w.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m.GetLabel(), labels) {
				continue
			}
			if isGauge {
				sum += m.GetGauge().GetValue()
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// hasLabels reports whether the label pairs lps include every pair of labels.
func hasLabels[P interface {
	GetName() string
	GetValue() string
}](lps []P, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range lps {
			found = found || lp.GetName() == k && lp.GetValue() == v
		}
		if !found {
			return false
		}
	}
	return true
}
