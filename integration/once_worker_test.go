package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The worker faults of issue 36's proof: a worker process whose handlers
// returned nil (their locks released, their completion records written)
// stops before asynq acknowledges the tasks, killed or paused past asynq's
// lease. asynq then delivers every one of them again to a fresh worker. With
// completion records the re-deliveries are skipped; the control, records
// off, runs each task twice. Each test runs both sides at once on one
// broker (a queue each), so that asynq's wait is paid once.
//
// How asynq re-delivers, from its source (v0.26): a dequeued task has a
// lease of 30s, which the worker's heartbeater extends every 5s while the
// task's handler has not returned; its recoverer, on each server at start
// and then once a minute, retries with asynq.ErrLeaseExpired every active
// task whose lease expired 30s ago or more (recoverer.go), and
// middleware.RetryDelay sends those back within a second. A worker whose
// lease lapsed writes nothing about the task when it goes on (processor.go:
// markAsDone and retry return at once when the lease is not valid, "let
// recoverer take care of it"), whichever of the handler's return and the
// heartbeater's notice of the expiry it sees first.

// onceTasks is how many tasks each side runs; the first one's handler fails
// its first run, and asynq retries it.
const onceTasks = 4

// onceSide is one side of a once-worker test: its own queue, worker A (its
// acknowledgments held, then killed or paused) and worker B (started later:
// its recoverer takes A's tasks back at its start).
type onceSide struct {
	records bool
	queue   string
	ids     []string
	a, b    *workerProc

	mu       sync.Mutex
	returned map[string]bool // tasks whose acknowledgment A holds
	ranB     map[string]int  // re-deliveries that ran the handler in B
	skipB    map[string]int  // re-deliveries B's middleware skipped
}

// onceRig is the broker (also the store), 3 lock nodes and both sides.
type onceRig struct {
	broker *redistest.Node
	client *redis.Client // to the broker
	insp   *asynq.Inspector
	prefix string
	sides  []*onceSide
}

// startOnceRig starts the servers and the four worker processes (at once:
// each pays for the binary's start), enqueues every side's tasks, and
// follows the workers' events.
func startOnceRig(t *testing.T) *onceRig {
	t.Helper()
	nodes := redistest.StartCluster(t, 3)
	broker := redistest.StartNode(t)
	rig := &onceRig{broker: broker, client: broker.Client(t), insp: inspector(t, broker), prefix: "once:" + safeName(t.Name()) + ":"}
	var cfgs []workerConfig
	for _, records := range []bool{true, false} {
		s := &onceSide{records: records, queue: "records-" + strconv.FormatBool(records),
			returned: map[string]bool{}, ranB: map[string]int{}, skipB: map[string]int{}}
		rig.sides = append(rig.sides, s)
		for _, role := range []string{"A", "B"} {
			cfgs = append(cfgs, workerConfig{ID: s.queue + "/" + role, Mode: modeOnce,
				Nodes: nodes.URLs(), Store: broker.ServerAddr(), KeyPrefix: rig.prefix,
				TTL: 10 * time.Second, NodeTimeout: 2 * time.Second, Goroutines: onceTasks, Limit: 2 * time.Minute,
				Queue: s.queue, Records: records, HoldAck: role == "A"})
		}
	}
	procs := make([]*workerProc, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() { procs[i], errs[i] = launchWorker(t, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	cl := asynqClient(t, broker)
	for i, s := range rig.sides {
		s.a, s.b = procs[2*i], procs[2*i+1]
		go s.follow(s.a, false)
		go s.follow(s.b, true)
		for n := range onceTasks {
			id := fmt.Sprintf("%s-%d", s.queue, n)
			s.ids = append(s.ids, id)
			b, _ := json.Marshal(onceTask{SKU: id, FailFirst: n == 0})
			if _, err := cl.Enqueue(asynq.NewTask(onceType, b), asynq.TaskID(id), asynq.Queue(s.queue),
				asynq.Retention(time.Hour)); err != nil { // kept completed: verdict reads each result
				t.Fatal(err)
			}
		}
	}
	return rig
}

// follow counts the events of worker w (B when fresh) until its stdout ends.
func (s *onceSide) follow(w *workerProc, fresh bool) {
	for e := range w.events {
		s.mu.Lock()
		switch {
		case e.Event == "returned" && !fresh:
			s.returned[e.Value] = true
		case e.Event == "ran" && fresh:
			s.ranB[e.Value]++
		case e.Event == "skipped" && fresh:
			s.skipB[e.Value]++
		}
		s.mu.Unlock()
	}
}

// each calls f for every side.
func (rig *onceRig) each(t *testing.T, f func(*onceSide) error) {
	t.Helper()
	for _, s := range rig.sides {
		if err := f(s); err != nil {
			t.Fatalf("%s: %v", s.queue, err)
		}
	}
}

// waitSides waits (bounded) until cond holds for every side.
func (rig *onceRig) waitSides(t *testing.T, what string, limit time.Duration, cond func(*onceSide) bool) {
	t.Helper()
	ok := waitUntil(limit, func() bool {
		for _, s := range rig.sides {
			s.mu.Lock()
			c := cond(s)
			s.mu.Unlock()
			if !c {
				return false
			}
		}
		return true
	})
	if !ok {
		for _, s := range rig.sides {
			t.Logf("%s: A holds %d acknowledgments; B ran %v, skipped %v; A: %s; B: %s", s.queue, len(s.returned), s.ranB, s.skipB,
				stderrTail(s.a.stderr.String()), stderrTail(s.b.stderr.String()))
		}
		t.Fatalf("%s: not within %v", what, limit)
	}
}

// runHeld starts every side's worker A and waits until it holds the
// acknowledgment of each of its tasks: their handlers returned nil and their
// locks were released.
func (rig *onceRig) runHeld(t *testing.T) {
	t.Helper()
	rig.each(t, func(s *onceSide) error { return s.a.send("go") })
	rig.waitSides(t, "every task run and its acknowledgment held", time.Minute, func(s *onceSide) bool { return len(s.returned) == len(s.ids) })
}

// checkOrphaned fails unless every task is still active in the broker with
// its lease expired when expired is set: asynq never heard of its
// completion.
func (rig *onceRig) checkOrphaned(t *testing.T, expired bool) {
	t.Helper()
	rig.each(t, func(s *onceSide) error {
		active, err := rig.insp.ListActiveTasks(s.queue, asynq.PageSize(100))
		if err != nil {
			return err
		}
		var ids []string
		for _, ti := range active {
			if ti.IsOrphaned || !expired {
				ids = append(ids, ti.ID)
			}
		}
		if slices.Sort(ids); !slices.Equal(ids, s.ids) {
			return fmt.Errorf("active tasks (lease expired: %v) %v, want %v", expired, ids, s.ids)
		}
		return nil
	})
}

// moveLeases sets the expiry of every task's lease in the broker (asynq's
// lease set, scored in Unix seconds) to at.
func (rig *onceRig) moveLeases(t *testing.T, at func(old int64) int64) {
	t.Helper()
	ctx := context.Background()
	rig.each(t, func(s *onceSide) error {
		key := "asynq:{" + s.queue + "}:lease"
		for _, id := range s.ids {
			old, err := rig.client.ZScore(ctx, key, id).Result()
			if err != nil {
				return fmt.Errorf("lease of %s: %w", id, err)
			}
			if err := rig.client.ZAddXX(ctx, key, redis.Z{Score: float64(at(int64(old))), Member: id}).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

// leasesEnd returns when the last task's lease ends in the worker that
// holds it: a lease's expiry is stored in whole seconds, rounded down.
func (rig *onceRig) leasesEnd(t *testing.T) time.Time {
	t.Helper()
	var last int64
	rig.each(t, func(s *onceSide) error {
		for _, id := range s.ids {
			v, err := rig.client.ZScore(context.Background(), "asynq:{"+s.queue+"}:lease", id).Result()
			if err != nil {
				return fmt.Errorf("lease of %s: %w", id, err)
			}
			last = max(last, int64(v))
		}
		return nil
	})
	return time.Unix(last+1, 0)
}

// redeliver starts every side's worker B, whose recoverer takes the tasks
// back at its start, and waits until each task came back to it and its
// queue is empty. It fails if a task came back more than once.
func (rig *onceRig) redeliver(t *testing.T) {
	t.Helper()
	rig.each(t, func(s *onceSide) error { return s.b.send("go") })
	rig.waitSides(t, "every task delivered again", time.Minute, func(s *onceSide) bool {
		for _, id := range s.ids {
			if s.ranB[id]+s.skipB[id] == 0 {
				return false
			}
		}
		return true
	})
	rig.each(t, func(s *onceSide) error {
		if !waitUntil(30*time.Second, func() bool {
			qi, err := rig.insp.GetQueueInfo(s.queue)
			return err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
		}) {
			return errors.New("queue not drained in 30s")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range s.ids {
			if n := s.ranB[id] + s.skipB[id]; n != 1 {
				return fmt.Errorf("task %s delivered %d times to the fresh worker, want 1", id, n)
			}
		}
		return nil
	})
}

// verdict checks every side's outcome from the store: with records each
// task applied once and every re-delivery skipped; the control applied each
// twice. The task whose first run failed ran once more: a failure leaves no
// record.
func (rig *onceRig) verdict(t *testing.T) {
	t.Helper()
	for _, s := range rig.sides {
		applied, runs := rig.count(t, onceAppliedKey, s.ids), rig.count(t, onceRunsKey, s.ids)
		s.mu.Lock()
		skipped := len(s.skipB)
		s.mu.Unlock()
		t.Logf("%s: runs %v, applied %v, %d re-deliveries skipped", s.queue, runs, applied, skipped)
		want := 1
		if !s.records {
			want = 2
		}
		for i, id := range s.ids {
			wantRuns := want
			if i == 0 {
				wantRuns++ // its failed first run
			}
			if applied[id] != want || runs[id] != wantRuns {
				if !s.records {
					t.Fatalf("control without records: task %s applied %d times (runs %d), want %d: the test cannot tell", id, applied[id], runs[id], want)
				}
				t.Fatalf("with records: task %s applied %d times (runs %d), want once (runs %d)", id, applied[id], runs[id], wantRuns)
			}
		}
		if s.records && skipped != len(s.ids) {
			t.Fatalf("with records: %d re-deliveries skipped, want %d", skipped, len(s.ids))
		}
		if s.records {
			rig.checkSkipResults(t, s)
		}
	}
}

// checkSkipResults checks that each skipped task, kept completed by
// asynq.Retention, says in its result (what asynqmon and the Inspector show)
// that it was a re-delivery of the run that completed: run 0, or 1 for the
// task whose first run failed.
func (rig *onceRig) checkSkipResults(t *testing.T, s *onceSide) {
	t.Helper()
	for i, id := range s.ids {
		run := 0
		if i == 0 {
			run = 1
		}
		want := fmt.Sprintf("asynqlock: re-delivery of run %d (asynq retry count), which completed under its lock at ", run)
		ti, err := rig.insp.GetTaskInfo(s.queue, id)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		at, ok := strings.CutPrefix(string(ti.Result), want)
		at, ok2 := strings.CutSuffix(at, "; handler not run")
		when, perr := time.Parse(time.RFC3339Nano, at)
		// The run completed before its re-delivery was skipped, within the test.
		if ti.State != asynq.TaskStateCompleted || !ok || !ok2 || perr != nil || when.After(ti.CompletedAt.Add(time.Second)) || when.Before(ti.CompletedAt.Add(-10*time.Minute)) {
			t.Fatalf("task %s: state %v, result %q, want completed with %q<time of the run's completion, before %v>; handler not run",
				id, ti.State, ti.Result, want, ti.CompletedAt)
		}
	}
}

// count reads the store's counters key+id.
func (rig *onceRig) count(t *testing.T, key string, ids []string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, id := range ids {
		v, err := rig.client.Get(context.Background(), rig.prefix+key+id).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		n[id] = v
	}
	return n
}

// TestOnceWorkerKilledBeforeAck: worker A's handlers return nil, their
// locks are released (the records written), and A is SIGKILLed before asynq
// acknowledges any of its tasks. Once their leases expired, a fresh worker's
// recoverer brings every task back: with records none runs again; the
// control runs each twice.
//
// Instead of waiting about a minute for asynq's lease and its recoverer's
// margin, the test moves the leases' expiry in the broker 61s back, where the
// wait would have left them (the killed worker can no longer extend them),
// and starts the fresh worker, whose recoverer runs at its start: the
// re-delivery is asynq's own (recoverer, ErrLeaseExpired, retry).
func TestOnceWorkerKilledBeforeAck(t *testing.T) {
	t.Parallel()
	rig := startOnceRig(t)
	rig.runHeld(t)
	rig.each(t, func(s *onceSide) error {
		if err := s.a.cmd.Process.Kill(); err != nil {
			return err
		}
		<-s.a.done
		return nil
	})
	rig.checkOrphaned(t, false) // not yet expired: asynq would wait for them
	rig.moveLeases(t, func(int64) int64 { return time.Now().Add(-61 * time.Second).Unix() })
	rig.checkOrphaned(t, true)
	rig.redeliver(t)
	rig.verdict(t)
}

// TestOnceWorkerPausedPastItsLease: worker A's handlers return nil, their
// locks are released (the records written), and A is SIGSTOPped before
// asynq acknowledges any of its tasks, until their leases have expired in A
// itself (25 to 31s: asynq's lease, in real time), then continued, told to
// let its acknowledgments go, and shut down gracefully. asynq in A writes
// nothing about the tasks (their leases lapsed); they stay active in the
// broker, and a fresh worker's recoverer brings every one back: with
// records none runs again; the control runs each twice. So asynq does not
// prevent the re-run; the records do.
//
// The recoverer takes only leases expired 30s ago or more (a margin for
// clocks); instead of that wait, the test moves the expired leases 30s back
// in the broker, where it would have left them.
func TestOnceWorkerPausedPastItsLease(t *testing.T) {
	if pauseProcess(nil) != nil {
		t.Skip("pausing a process is not supported on this platform")
	}
	t.Parallel()
	rig := startOnceRig(t)
	rig.runHeld(t)
	rig.each(t, func(s *onceSide) error { return pauseProcess(s.a.cmd.Process) })
	paused := time.Now()
	for { // read again after the wait: an extension sent just before the pause may land late
		end := rig.leasesEnd(t)
		if !time.Now().Before(end) {
			break
		}
		if end.Sub(paused) > 40*time.Second {
			t.Fatalf("leases end %v after the pause, want at most asynq's 30s", end.Sub(paused))
		}
		time.Sleep(time.Until(end))
	}
	rig.each(t, func(s *onceSide) error {
		if err := resumeProcess(s.a.cmd.Process); err != nil {
			return err
		}
		if err := s.a.send("ack"); err != nil {
			return err
		}
		if err := s.a.send("stop"); err != nil {
			return err
		}
		select {
		case <-s.a.done:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("worker A still running 30s after stop: %s", stderrTail(s.a.stderr.String()))
		}
		if s.a.err != nil {
			return fmt.Errorf("worker A: %v: %s", s.a.err, stderrTail(s.a.stderr.String()))
		}
		return nil
	})
	t.Logf("A paused %v, past its tasks' leases; continued and shut down", time.Since(paused).Round(100*time.Millisecond))
	rig.checkOrphaned(t, true) // A wrote nothing: the leases had lapsed
	rig.moveLeases(t, func(old int64) int64 { return old - 30 })
	rig.redeliver(t)
	rig.verdict(t)
}
