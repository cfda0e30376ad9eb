package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// unlockedAdjustment is the payload of TestProofBadInput's tasks: an
// adjustment that, when Atomic, is applied with one INCRBY and needs no lock.
type unlockedAdjustment struct {
	adjustment
	Atomic bool `json:"atomic,omitempty"`
}

// skuUnlessAtomic is a KeyFunc that returns "" (run unlocked) for atomic
// adjustments and locks the others on their "sku" field.
func skuUnlessAtomic() middleware.KeyFunc {
	bySKU := middleware.ByField("sku")
	return func(ctx context.Context, t *asynq.Task) (string, error) {
		var a unlockedAdjustment
		if json.Unmarshal(t.Payload(), &a) == nil && a.Atomic {
			return "", nil
		}
		return bySKU(ctx, t)
	}
}

// badPayloads are malformed tasks, each with what its archived error must
// say besides the task's type, ID and field.
var badPayloads = []struct {
	kind, payload, reason string
}{
	{"not JSON", "sku=SKU-1;delta=1", "payload is not valid JSON"},
	{"empty", "", "payload is not valid JSON"},
	{"JSON array", `[{"sku":"SKU-1","delta":1}]`, "is not a JSON object"},
	{"no sku", `{"id":-1,"delta":1}`, `field "sku" is missing`},
	{"sku null", `{"id":-1,"sku":null,"delta":1}`, `field "sku" is null`},
}

// TestProofBadInput: malformed payloads and tasks whose key is empty, mixed
// into a stream of locked inventory adjustments run by three workers
// (worker.New, in process). Every malformed task is archived at its first
// run with an error naming its type, ID, the field and what is wrong, and
// never reaches the handler; every task with an empty key runs unlocked and
// completes; every locked task runs under its lock and completes exactly
// once; every SKU's stock is exact.
func TestProofBadInput(t *testing.T) {
	const (
		nLocked   = 300 // over lockedSKUs SKUs, read-modify-write under the lock
		nAtomic   = 40  // over 4 other SKUs, one INCRBY, empty key
		nPerBad   = 12  // of each kind of badPayloads
		lockedSKU = 10
		workers   = 3
	)
	nodes := redistest.StartCluster(t, 5)
	broker, store := redistest.StartNode(t), redistest.StartNode(t)
	inv := newInventory(t, store, time.Millisecond)
	var wrongLock, reachedBad atomic.Int64
	h := func(ctx context.Context, task *asynq.Task) error {
		var a unlockedAdjustment
		if err := json.Unmarshal(task.Payload(), &a); err != nil || a.SKU == "" {
			reachedBad.Add(1)
			return fmt.Errorf("malformed task reached the handler: %w", asynq.SkipRetry)
		}
		if _, locked := middleware.LockFromContext(ctx); locked == a.Atomic {
			wrongLock.Add(1)
		}
		if !a.Atomic {
			return inv.ProcessTask(ctx, task)
		}
		if err := inv.store.IncrBy(ctx, "stock:"+a.SKU, a.Delta).Err(); err != nil {
			return err
		}
		inv.mu.Lock()
		inv.applied[a.ID]++
		inv.doneAt[a.ID] = time.Now()
		inv.mu.Unlock()
		return nil
	}
	var ws []*worker.Worker
	for range workers {
		w := newWorker(t, workerVars(broker, nodes, map[string]string{"REDLOCK_TTL": "2s", "WORKER_CONCURRENCY": "8"}))
		if err := w.Handle(taskType, asynq.HandlerFunc(h), skuUnlessAtomic()); err != nil {
			t.Fatal(err)
		}
		runWorker(t, w)
		ws = append(ws, w)
	}

	type task struct {
		payload []byte
		bad     int // 1 + index in badPayloads; 0 for a good task
	}
	expected := map[string]int64{}
	var tasks []task
	for i := range nLocked + nAtomic {
		a := unlockedAdjustment{adjustment: adjustment{ID: i, SKU: fmt.Sprintf("SKU-%d", i%lockedSKU), Delta: 1}}
		if i >= nLocked {
			a.SKU, a.Atomic = fmt.Sprintf("FREE-%d", i%4), true
		}
		expected[a.SKU] += a.Delta
		b, _ := json.Marshal(a)
		tasks = append(tasks, task{payload: b})
	}
	for k, bp := range badPayloads {
		for range nPerBad {
			tasks = append(tasks, task{payload: []byte(bp.payload), bad: k + 1})
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	client := asynqClient(t, broker)
	bad := map[string]int{} // asynq task ID -> 1 + index in badPayloads
	start := time.Now()
	for _, tk := range tasks {
		info, err := client.Enqueue(asynq.NewTask(taskType, tk.payload))
		if err != nil {
			t.Fatal(err)
		}
		if tk.bad > 0 {
			bad[info.ID] = tk.bad
		}
	}
	good := nLocked + nAtomic
	inv.waitDone(t, good, time.Minute)
	insp := inspector(t, broker)
	qi := waitQueueEmpty(t, insp, 30*time.Second)
	elapsed := time.Since(start)

	archived, err := insp.ListArchivedTasks("default", asynq.PageSize(len(tasks)))
	if err != nil {
		t.Fatal(err)
	}
	unclear, goodArchived, retried := 0, 0, 0
	var firstUnclear string
	sample := map[int]string{} // kind -> an archived error
	for _, ti := range archived {
		k, ok := bad[ti.ID]
		if !ok {
			goodArchived++
			continue
		}
		delete(bad, ti.ID)
		if ti.Retried != 0 {
			retried++
		}
		want := []string{taskType, ti.ID, `field "sku"`, badPayloads[k-1].reason}
		for _, s := range want {
			if !strings.Contains(ti.LastErr, s) {
				unclear++
				if firstUnclear == "" {
					firstUnclear = fmt.Sprintf("%s task %s archived with %q, which does not say %q", badPayloads[k-1].kind, ti.ID, ti.LastErr, s)
				}
				break
			}
		}
		if _, ok := sample[k]; !ok {
			sample[k] = ti.LastErr
		}
	}
	notArchived := len(bad)
	duplicated := 0
	for i := range good {
		duplicated += max(inv.applied[i]-1, 0)
	}
	unitsLost := inv.lost(t, expected)
	var badKeys, requeues float64
	for _, w := range ws {
		badKeys += counter(t, w, "asynqlock_task_bad_keys_total", nil)
		requeues += counter(t, w, "asynqlock_task_conflicts_total", map[string]string{"action": "requeue"})
	}
	var took []time.Duration
	for _, at := range inv.doneAt {
		took = append(took, at.Sub(start))
	}
	slices.Sort(took)
	median, last := took[len(took)/2], took[len(took)-1]
	nBad := len(badPayloads) * nPerBad
	kinds := make([]string, len(badPayloads))
	for i, bp := range badPayloads {
		kinds[i] = bp.kind
	}
	report.Add(Row{
		Scenario: fmt.Sprintf("asynq workers (worker.New) × %d, concurrency 8: %d locked + %d unlocked tasks over %d SKUs, 5 nodes",
			workers, nLocked, nAtomic, lockedSKU+4),
		Fault:      fmt.Sprintf("%d malformed payloads (%s) and %d empty keys mixed in", nBad, strings.Join(kinds, ", "), nAtomic),
		Ops:        inv.done(),
		Violations: int(reachedBad.Load()+wrongLock.Load()) + notArchived + unclear + retried + goodArchived,
		Lost:       int(unitsLost),
		Duplicated: duplicated,
		Notes: fmt.Sprintf("all %d tasks done in %v (half of the good ones within %v, the last after %v; %d requeues of a task whose SKU was busy); every malformed task archived at its first run (SkipRetry, %d retried), none reached the handler (%d did), "+
			"each error naming the task type, ID, field and fault (%d did not), e.g. %s; bad-key metric %d; "+
			"%d empty-key tasks ran unlocked and completed, every other task ran under its lock (%d ran otherwise); every good task applied once, stock exact",
			len(tasks), elapsed.Round(10*time.Millisecond), roundDuration(median), roundDuration(last), int(requeues), retried, reachedBad.Load(), unclear, "`"+sample[len(badPayloads)]+"`", int(badKeys),
			nAtomic, wrongLock.Load()),
	})

	if qi.Archived != nBad || goodArchived != 0 || notArchived != 0 {
		t.Fatalf("%d tasks archived, %d of them good; %d malformed tasks not archived; want exactly the %d malformed ones", qi.Archived, goodArchived, notArchived, nBad)
	}
	if unclear != 0 {
		t.Fatalf("%d archived errors unclear; first: %s", unclear, firstUnclear)
	}
	if retried != 0 || reachedBad.Load() != 0 || wrongLock.Load() != 0 {
		t.Fatalf("%d malformed tasks retried, %d reached the handler; %d tasks ran with the wrong lock state", retried, reachedBad.Load(), wrongLock.Load())
	}
	if unitsLost != 0 || duplicated != 0 {
		t.Fatalf("%d units lost, %d tasks applied twice", unitsLost, duplicated)
	}
	if int(badKeys) != nBad {
		t.Fatalf("bad-key metric %v, want %d", badKeys, nBad)
	}
	for k, s := range sample {
		t.Logf("%s: %s", badPayloads[k-1].kind, s)
	}
	t.Logf("%d tasks in %v: half of the good ones done within %v, the last after %v; %d requeues", len(tasks), elapsed, median, last, int(requeues))
}
