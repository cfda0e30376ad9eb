package worker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A worker hosts a cron scheduler: Run starts it, its runs and this
// replica's clock offset to each lock node appear on /metrics, and
// shutdown stops it.
func TestWorkerHostsSchedulerWithMetrics(t *testing.T) {
	f := newFixture(t)
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Scheduler()
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	if err := s.Register("tick", "* * * * * *", func(context.Context) error { runs.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	stop := start(t, w)
	deadline := time.Now().Add(20 * time.Second)
	var body string
	for {
		_, body = get(t, w, "/metrics")
		if strings.Contains(body, `asynqlock_cron_runs_total{job="tick",outcome="ran"}`) &&
			strings.Count(body, "asynqlock_cron_clock_offset_seconds{node=") == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cron metrics missing after %d runs:\n%s", runs.Load(), grepLines(body, "asynqlock_cron"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	after := runs.Load()
	time.Sleep(1500 * time.Millisecond)
	if runs.Load() != after {
		t.Fatal("the scheduler still runs jobs after the worker stopped")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
