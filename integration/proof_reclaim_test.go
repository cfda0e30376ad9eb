package integration

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// reclaimOrphans brings back the tasks a SIGKILLed worker left active
// (orphans, killed at killedAt): it waits until asynq marks them all orphaned
// (their lease expired), then 30s more (the recoverer's margin), tells fresh
// to serve (its recoverer runs at start), and once the recoverer has moved
// them to the retry set runs them at once with Inspector.RunTask, as an
// operator would, instead of after asynq's backoff. It returns when they were
// orphaned and reclaimed and the backoffs skipped. Each loop is bounded.
func reclaimOrphans(t *testing.T, insp *asynq.Inspector, orphans map[string]bool, killedAt time.Time, fresh *workerProc) (orphaned, reclaimed time.Time, backoff []time.Duration) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	deadline := killedAt.Add(40 * time.Second)
	for orphaned.IsZero() {
		active, err := insp.ListActiveTasks("default", asynq.PageSize(100))
		must(err)
		n := 0
		for _, ti := range active {
			if orphans[ti.ID] && ti.IsOrphaned {
				n++
			}
		}
		switch {
		case n == len(orphans):
			orphaned = time.Now()
		case time.Now().After(deadline):
			t.Fatalf("%d of %d tasks of the killed worker orphaned %v after the kill", n, len(orphans), time.Since(killedAt))
		default:
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(time.Until(orphaned.Add(30*time.Second + 250*time.Millisecond)))
	must(fresh.send("go"))

	// The fresh worker's recoverer moves the tasks to the retry set; a
	// surviving worker's own recoverer (a minute after its start) would do
	// the same a little later: the bound allows for it.
	deadline = killedAt.Add(80 * time.Second)
	for reclaimed.IsZero() {
		done, due := 0, []*asynq.TaskInfo{}
		for id := range orphans {
			switch ti, err := insp.GetTaskInfo("default", id); {
			case errors.Is(err, asynq.ErrTaskNotFound):
				done++ // run again and deleted already
			case err != nil:
				t.Fatal(err)
			case ti.State == asynq.TaskStateRetry && strings.Contains(ti.LastErr, asynq.ErrLeaseExpired.Error()):
				due = append(due, ti)
			case ti.State != asynq.TaskStateActive || !ti.IsOrphaned:
				// Moved on already: middleware.RetryDelay gives a recovered
				// task less than a second, so it may be past the retry set.
				done++
			}
		}
		switch {
		case done+len(due) == len(orphans):
			reclaimed = time.Now()
			for _, ti := range due {
				backoff = append(backoff, time.Until(ti.NextProcessAt))
				if err := insp.RunTask("default", ti.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
					// It left the retry set on its own meanwhile.
					t.Logf("run %s: %v", ti.ID, err)
				}
			}
		case time.Now().After(deadline):
			t.Fatalf("%d of %d tasks of the killed worker reclaimed %v after the kill", done+len(due), len(orphans), time.Since(killedAt))
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	return orphaned, reclaimed, backoff
}

// launchTaskWorkers starts task worker processes A, B and C (worker.New,
// concurrency 8, fencing; hold: the handler's pauses) and follows their
// events. All three start now (each pays for the binary's start-up) but
// serve only when told "go". followed[i] closes once all of procs[i]'s
// lines have been read.
func launchTaskWorkers(t *testing.T, env *proofEnv, hold [2]time.Duration) (procs []*workerProc, trace *taskTrace, followed []<-chan struct{}) {
	t.Helper()
	names := []string{"A", "B", "C"}
	procs = make([]*workerProc, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		cfg := env.config(t, name, modeTasks)
		cfg.Goroutines, cfg.Fencing = 8, true
		cfg.Hold = hold
		cfg.Limit = 3 * time.Minute
		wg.Go(func() { procs[i], errs[i] = launchWorker(t, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	trace = newTaskTrace()
	followed = make([]<-chan struct{}, len(procs))
	for i, p := range procs {
		followed[i] = trace.follow(names[i], p)
	}
	return procs, trace, followed
}
