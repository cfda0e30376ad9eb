package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// documentedSeries returns the asynqlock_* names docs/guide/OPERATIONS.md's
// Metrics section lists.
func documentedSeries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/guide/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## Metrics\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	seen := map[string]bool{}
	var names []string
	for _, m := range regexp.MustCompile("`(asynqlock_[a-z_]+)[`{]").FindAllStringSubmatch(sec, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			names = append(names, m[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("docs/guide/OPERATIONS.md's Metrics section names %d asynqlock series: the section was not found whole", len(names))
	}
	return names
}

// TestDocumentedSeriesExistFromStart: before any task ran, /metrics has a
// sample of every series docs/guide/OPERATIONS.md documents (the labelled ones
// at 0 for their known label values), so that a dashboard panel or an
// alert finds them from the start; and the page passes promtool's lint.
func TestDocumentedSeriesExistFromStart(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	if err := w.Handle("stock:adjust", noop, middleware.ByField("sku")); err != nil {
		t.Fatal(err)
	}
	s, err := w.Scheduler()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register("nightly", "0 3 * * *", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	start(t, w)
	waitStatus(t, w, "/readyz", 200, 30*time.Second)
	var body string
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, body = get(t, w, "/metrics")
		missing = missing[:0]
		for _, name := range documentedSeries(t) {
			if !regexp.MustCompile(`(?m)^` + name + `(_bucket|_count|_sum)?[{ ]`).MatchString(body) {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks documented series %v after 30s", missing)
		}
	}
	for _, want := range []string{
		`asynqlock_lock_acquire_seconds_count{outcome="quorum"} 0`,
		`asynqlock_task_conflicts_total{action="park",policy="wait"} 0`,
		`asynqlock_cron_runs_total{job="nightly",outcome="skipped_overlap"} 0`,
		// any count: a start-up probe that timed out on a loaded machine is an error
		`asynqlock_lock_node_errors_total{node="` + f.nodes.Nodes[0].Addr() + `"} `,
		`asynqlock_queue_parked_tasks{queue="default",state="retry"} 0`,
		"asynqlock_task_redeliveries_skipped_total 0",
		"asynqlock_locks_held 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The lint after tasks ran is TestMetricsPassPromtool's; this one is
	// on the zero series.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := promtoolCheck(t, promtool, withoutFamilies(body, "asynq_")); err != nil {
			t.Errorf("promtool check metrics on our families at start: %v\n%s", err, out)
		}
	}
}

// TestHeldLocksGauge: asynqlock_locks_held counts the handlers running
// under their lock, and falls back to 0 when they return.
func TestHeldLocksGauge(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	running := make(chan struct{}, 2)
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		running <- struct{}{}
		<-release
		return nil
	})
	if err := w.Handle("stock:adjust", h, middleware.ByField("sku")); err != nil {
		t.Fatal(err)
	}
	start(t, w)
	for _, sku := range []string{"A", "B"} {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"`+sku+`"}`))); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-running:
		case <-time.After(30 * time.Second):
			t.Fatal("the tasks did not start")
		}
	}
	if _, body := get(t, w, "/metrics"); metricValue(t, body, "asynqlock_locks_held") != 2 {
		t.Fatalf("two handlers hold their locks; /metrics says:\n%s", grepLines(body, "asynqlock_locks_held"))
	}
	close(release)
	waitFor(t, "asynqlock_locks_held back to 0", 30*time.Second, func() bool {
		_, body := get(t, w, "/metrics")
		return metricValue(t, body, "asynqlock_locks_held") == 0 && strings.Contains(body, "asynqlock_locks_held 0")
	})
}

// TestReusedTaskIDRunsUnderWorker: a fresh enqueue reusing a completed
// task's ID and payload runs its handler under worker.New, with completion
// records on as off, and counts no skipped re-delivery: a record names one
// run of one enqueue (asynq's re-delivery of a run whose completion it
// missed is skipped: integration's TestOnce* tests).
func TestReusedTaskIDRunsUnderWorker(t *testing.T) {
	for _, window := range []time.Duration{time.Hour, 0} {
		f := newFixture(t)
		f.cfg.CompletionWindow = window
		w, err := New(f.cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		runs := make(chan struct{}, 2)
		h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs <- struct{}{}; return nil })
		if err := w.Handle("stock:adjust", h, middleware.ByField("sku")); err != nil {
			t.Fatal(err)
		}
		start(t, w)
		series := "asynqlock_task_redeliveries_skipped_total"
		for delivery := 1; delivery <= 2; delivery++ {
			// The same ID is free again once asynq deleted the completed task.
			waitFor(t, "task t1 enqueued", 30*time.Second, func() bool {
				_, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`)), asynq.TaskID("t1"))
				if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
					t.Fatal(err)
				}
				return err == nil
			})
			waitFor(t, "the delivery to complete", 30*time.Second, func() bool {
				_, body := get(t, w, "/metrics")
				return len(runs)+int(metricValue(t, body, series)) == delivery
			})
		}
		_, body := get(t, w, "/metrics")
		if skipped := metricValue(t, body, series); skipped != 0 || len(runs) != 2 {
			t.Fatalf("window %v: handler ran %d times, %s %v; want 2 runs, 0 skipped", window, len(runs), series, skipped)
		}
	}
}

// TestRedeliveriesSkippedCounted: each skipped re-delivery the middleware
// reports counts once in asynqlock_task_redeliveries_skipped_total, and
// other events count nothing there.
func TestRedeliveriesSkippedCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	series := "asynqlock_task_redeliveries_skipped_total"
	m.observeTask(middleware.Event{Kind: "conflict"})
	if got := counterValue(t, m.redeliveries); got != 0 {
		t.Fatalf("%s %v after a conflict, want 0", series, got)
	}
	for range 2 {
		m.observeTask(middleware.Event{Kind: "redelivery_skipped"})
	}
	if got := counterValue(t, m.redeliveries); got != 2 {
		t.Fatalf("%s %v after 2 skipped re-deliveries, want 2", series, got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
