package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// TestFailedReleasesLogOncePerChangeOfState: tasks whose releases meet a
// majority of lock nodes failing make one line at Warn, naming the nodes
// and the cause, not one per task (each task's failure is at Debug: the
// control that there were that many); the first release that works again
// makes one line at Info, and the next ones none.
func TestFailedReleasesLogOncePerChangeOfState(t *testing.T) {
	const tasks = 4
	srvs := []*redistest.Server{redistest.StartServer(t), redistest.StartServer(t), redistest.StartServer(t)}
	locks, err := redlock.NewFromURLs([]string{srvs[0].URL(), srvs[1].URL(), srvs[2].URL()}, patient()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	withMeta(t, taskMeta{id: "abc", queue: "default", known: true})
	logs := &logCapture{}
	started, gate := make(chan struct{}, tasks), make(chan struct{})
	h := Lock(locks, ByField("sku"), WithLogger(slog.New(logs)))(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		started <- struct{}{}
		<-gate
		return nil
	}))
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Go(func() {
			if err := h.ProcessTask(ctx, task("stock:adjust", fmt.Sprintf(`{"sku":"SKU-%d"}`, i))); err != nil {
				t.Errorf("task %d: %v", i, err)
			}
		})
	}
	for range tasks {
		<-started
	}
	for _, s := range srvs[:2] { // a majority of the lock nodes fails every command
		if err := s.Refuse(true); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	wg.Wait()
	failed := func() int {
		return count(logs.lines(slog.LevelDebug), "lock releases failing")
	}
	for deadline := time.Now().Add(30 * time.Second); failed() < tasks; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d releases reported after 30s: %q", failed(), tasks, logs.lines(slog.LevelDebug))
		}
	}
	warn := logs.lines(slog.LevelWarn)
	if len(warn) != 1 || !strings.HasPrefix(warn[0], "WARN lock releases failing") || !strings.Contains(warn[0], "NOPERM") ||
		!strings.Contains(warn[0], srvs[0].Addr()) || !strings.Contains(warn[0], srvs[1].Addr()) || strings.Contains(warn[0], srvs[2].Addr()) {
		t.Fatalf("lines at Warn and above after %d failed releases: %q; want one naming the two failing nodes and the cause", tasks, warn)
	}
	// Control: each other task's failure was logged, at Debug.
	if n := count(logs.lines(slog.LevelDebug), "DEBUG lock releases failing"); n != tasks-1 {
		t.Fatalf("%d per-task Debug lines, want %d", n, tasks-1)
	}

	for _, s := range srvs[:2] {
		if err := s.Refuse(false); err != nil {
			t.Fatal(err)
		}
	}
	back := func() int { return count(logs.lines(slog.LevelInfo), "INFO lock releases work again") }
	// Three runs of a SKU the outage left alone (the others' keys stay on
	// the nodes for their TTL): each waits for the release of the one
	// before (the resource counts as held until its release answered), so
	// the first two releases are logged once the third run is done.
	for i := range 3 {
		if err := h.ProcessTask(ctx, task("stock:adjust", `{"sku":"SKU-after"}`)); err != nil {
			t.Fatalf("task %d after the outage: %v", i, err)
		}
		<-started
	}
	if n := back(); n != 1 {
		t.Fatalf("%d recovery lines after releases that worked, want 1: %q", n, logs.lines(slog.LevelInfo))
	}
}
