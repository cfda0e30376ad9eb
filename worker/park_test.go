package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
)

// TestWorkerParksHotTasksVisibly: a worker built by New parks tasks of a
// busy resource and promotes them; /metrics shows parkings, promotions,
// park time and hand-overs, and the log says when a task is parked and why.
func TestWorkerParksHotTasksVisibly(t *testing.T) {
	f := newFixture(t)
	f.cfg.Concurrency = 4
	var logs workertest.Buffer
	w, err := New(f.cfg, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := map[string]int{}
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		time.Sleep(20 * time.Millisecond)
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		done[id]++
		mu.Unlock()
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	const n = 30
	b, _ := json.Marshal(map[string]any{"sku": "HOT"})
	for range n {
		if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", b)); err != nil {
			t.Fatal(err)
		}
	}
	const inBroker = `asynqlock_queue_parked_tasks{queue="default",state="retry"}`
	maxParked := 0.0 // the most parked tasks the broker held at a scrape
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		got := len(done)
		mu.Unlock()
		if got == n {
			break
		}
		_, page := get(t, w, "/metrics")
		maxParked = max(maxParked, metricValue(t, page, inBroker))
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks done", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for id, c := range done {
		if c != 1 {
			t.Fatalf("task %s ran %d times", id, c)
		}
	}
	_, body := get(t, w, "/metrics")
	parked := metricValue(t, body, `asynqlock_task_conflicts_total{action="park",policy="wait"}`)
	promoted := metricValue(t, body, "asynqlock_task_promotions_total")
	if parked == 0 || promoted == 0 {
		t.Fatalf("parked %v, promoted %v: want both > 0 with 2 waiters per resource and %d tasks on one SKU", parked, promoted, n)
	}
	// The broker's count of parked tasks rose while the SKU was hot and is
	// back to 0 now that every task ran.
	if after := metricValue(t, body, inBroker); maxParked == 0 || after != 0 || !strings.Contains(body, inBroker) {
		t.Errorf("%s: at most %v while parked, %v after (present: %v); want > 0, then 0",
			inBroker, maxParked, after, strings.Contains(body, inBroker))
	}
	for _, m := range []string{"asynqlock_task_park_seconds_count", "asynqlock_lock_handovers_total{kind=", "asynqlock_parked_tasks"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if l := logs.String(); !strings.Contains(l, "task parked: resource busy") || !strings.Contains(l, "resource=task:stock:adjust:HOT") {
		t.Errorf("no debug line says a task was parked and why:\n%s", l)
	}
	// A library says nothing at Info per task or per park.
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "task parked") && !strings.Contains(line, "level=DEBUG") {
			t.Errorf("a park logged above Debug: %s", line)
		}
	}
}

// metricValue returns the value of the sample named exactly by series.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
