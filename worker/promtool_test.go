package worker

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// TestMetricsPassPromtool: the worker's /metrics, after it ran locked
// tasks (so every labelled series exists), passes `promtool check metrics`.
func TestMetricsPassPromtool(t *testing.T) {
	promtool := requireTool(t, "prometheus", "lint /metrics", "promtool")
	f := newFixture(t)
	f.cfg.ReadinessInterval = 100 * time.Millisecond
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 4)
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		done <- struct{}{}
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	for range 3 {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`))); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("tasks not processed")
		}
	}
	waitStatus(t, w, "/readyz", 200, 10*time.Second)
	_, body := get(t, w, "/metrics")
	if !strings.Contains(body, `asynqlock_lock_acquire_seconds_bucket{outcome="acquired"`) {
		t.Fatal("/metrics lacks the acquire histogram: the lint would not cover it")
	}
	// Our own families (asynqlock_*, and the Go, process and promhttp
	// collectors we register) pass the lint without a finding.
	own := withoutFamilies(body, "asynq_")
	if out, err := promtoolCheck(t, promtool, own); err != nil {
		t.Fatalf("promtool check metrics on our families: %v\n%s", err, out)
	}
	// asynq's queue collector (hibiken/asynq/x/metrics) names two gauges
	// *_total; they keep asynq's names, which its dashboards query. Those two
	// must be the only findings on the whole page.
	out, _ := promtoolCheck(t, promtool, body)
	got := strings.Fields(strings.ReplaceAll(out, "non-counter metrics should not have \"_total\" suffix", ""))
	want := []string{"asynq_queue_paused_total", "asynq_tasks_enqueued_total"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("promtool findings on the whole /metrics:\n%s\nwant only the upstream %v", out, want)
	}
	t.Logf("promtool check metrics: our %d lines pass; the whole page has only asynq's upstream findings %v", strings.Count(own, "\n"), want)
}

// promtoolCheck runs `promtool check metrics` on an exposition.
func promtoolCheck(t *testing.T, promtool, exposition string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// withoutFamilies drops the HELP, TYPE and sample lines of the metric
// families whose name starts with prefix.
func withoutFamilies(exposition, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(exposition) {
		name := line
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				name = f[1]
			}
		}
		if !strings.HasPrefix(name, prefix) {
			b.WriteString(line)
		}
	}
	return b.String()
}
