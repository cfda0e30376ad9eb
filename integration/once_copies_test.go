package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// TestOnceParkedCopiesRerunByAnOperator: a completion record names a run,
// not an ID, and an operator's re-run (Inspector.RunTask) is a new run, of
// a task as of its parked copies (resubmitted under "id~rN" on a last retry,
// see docs/guide/MIDDLEWARE.md), on a real broker, 3 real lock nodes and an asynq
// server. A's copy A~r1 completed in an earlier run, then an operator runs
// the archived A again while its resource is busy: A is resubmitted as A~r2,
// which finds A~r1's record and runs all the same. B ran as its copy B~r2
// (resubmitted the same way), then the operator runs B's older archived copy
// B~r1: it runs too. With records as without, A and B are applied twice each
// and no delivery is skipped; before records named a run, the records side
// skipped both re-runs. (A copy's re-delivery after a missed acknowledgment
// is skipped: middleware's TestParkedCopyCountsAsItsOriginal.)
func TestOnceParkedCopiesRerunByAnOperator(t *testing.T) {
	t.Parallel()
	for _, records := range []bool{true, false} {
		t.Run(fmt.Sprintf("records=%v", records), func(t *testing.T) {
			t.Parallel()
			runs, skipped := runParkedCopies(t, records)
			t.Logf("records %v: A applied %d times, B %d; %d deliveries skipped", records, runs.get("A"), runs.get("B"), skipped)
			if runs.get("A") != 2 || runs.get("B") != 2 || skipped != 0 {
				t.Fatalf("records %v: A applied %d times, B %d, %d deliveries skipped; want twice each (the operator's re-runs), none skipped", records, runs.get("A"), runs.get("B"), skipped)
			}
		})
	}
}

// runParkedCopies runs the scenario of TestOnceParkedCopies and returns the
// runs by task (a copy counting for its task) and the deliveries skipped.
func runParkedCopies(t *testing.T, records bool) (*runsByTask, int) {
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	locks := lockClient(t, nodes, redlock.WithNodeTimeout(time.Second))
	runs := &runsByTask{n: map[string]int{}}
	window := time.Duration(0)
	if records {
		window = time.Hour
	}
	var skips skipCount
	h := middleware.Lock(locks, middleware.ByType(), middleware.WithPolicy(middleware.Requeue()),
		middleware.WithBroker(brokerClient(t, broker)), middleware.WithCompletionWindow(window),
		middleware.WithObserver(skips.observe))(runs)
	startServer(t, broker, serverConfig(4), h)
	cl, insp := asynqClient(t, broker), inspector(t, broker)
	earlierRuns(t, cl, insp, runs) // A~r1 completed; A, B and B~r1 archived

	if !rerunWhileBusy(t, locks, insp, "A", "B") {
		t.Fatal("A and B were not resubmitted as copies within a minute")
	}
	copies := func() bool {
		return state(insp, "A~r2") == asynq.TaskStateCompleted && state(insp, "B~r2") == asynq.TaskStateCompleted
	}
	if !waitUntil(time.Minute, copies) {
		t.Fatalf("copies A~r2 and B~r2 not completed within a minute (%v, %v)", state(insp, "A~r2"), state(insp, "B~r2"))
	}
	if err := insp.RunTask("default", "B~r1"); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(time.Minute, func() bool { return absent(insp, "B~r1") }) {
		t.Fatalf("B~r1 run again by the operator is still %v after a minute", state(insp, "B~r1"))
	}
	waitQueueEmpty(t, insp, time.Minute)
	return runs, int(skips.n.Load())
}
