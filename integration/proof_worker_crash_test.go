package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestProofWorkerCrash: a worker process is SIGKILLed while several locked
// asynq tasks are inside their critical sections. The locks it held expire
// at their TTL and a surviving worker process takes the SKUs over; asynq
// redelivers the killed worker's tasks to a fresh worker process; every task
// completes, none is lost and none is applied twice, and the stock of every
// SKU is exact. The critical sections of all runs, the killed ones included,
// go through internal/checker.
//
// Why this test takes about a minute: asynq gives a dequeued task a lease of
// 30s (extended every 5s while its worker lives) and its recoverer reclaims
// only tasks whose lease expired 30s ago or more; it runs when a server
// starts and then once a minute. So a killed worker's tasks can come back no
// sooner than 55-60s after the kill. The test waits exactly that long and no
// longer: it watches the tasks until asynq marks them orphaned (their lease
// expired), and starts a fresh worker (whose recoverer runs at start) 30s
// after that. The recoverer then schedules each task's retry with asynq's
// default backoff (15-44s for a first retry); that wait proves nothing about
// locks, so the test runs the reclaimed tasks at once with
// Inspector.RunTask, as an operator would, and reports when asynq would
// have run them. The wait is asynq's, not the lock's (the SKUs pass to B
// within a couple of seconds, TTL included), and the test spends it asleep
// on its own servers and processes: it runs in parallel with the other
// parallel tests, TestProofWorkerCrashHotSKU among them.
func TestProofWorkerCrash(t *testing.T) {
	t.Parallel()
	const (
		nTasks = 36
		nSKUs  = 4
	)
	env := startProofEnv(t) // 5 lock nodes; the store is also the broker
	ctx := context.Background()
	insp := inspector(t, env.store)
	client := asynqClient(t, env.store)
	expected := map[string]int64{}
	ids := make([]string, nTasks)
	for i := range ids {
		a := adjustment{ID: i, SKU: fmt.Sprintf("SKU-%d", i%nSKUs), Delta: int64(i%5 + 1)}
		expected[a.SKU] += a.Delta
		ids[i] = fmt.Sprintf("adj-%02d", i)
		b, _ := json.Marshal(a)
		if _, err := client.Enqueue(asynq.NewTask(taskType, b), asynq.TaskID(ids[i])); err != nil {
			t.Fatal(err)
		}
	}

	// A is killed, B survives it, C is the fresh worker started once asynq
	// can reclaim A's tasks.
	procs, trace, followed := launchTaskWorkers(t, env, [2]time.Duration{150 * time.Millisecond, 250 * time.Millisecond})
	a, b, c := procs[0], procs[1], procs[2]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Kill A once at least three of its tasks are inside their critical
	// sections, some before their commit and some after it.
	must(a.send("go"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		pre, post := trace.inSection("A")
		if pre >= 1 && post >= 1 && pre+post >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker A never had 3 tasks in their sections on both sides of the commit (now %d before, %d after)", pre, post)
		}
		time.Sleep(2 * time.Millisecond)
	}
	must(a.cmd.Process.Kill())
	<-a.done
	killed := stamp()
	killedAt := time.Now()
	<-followed[0] // every line A wrote has been read

	// B and C have not served yet: every active task is one of A's.
	active, err := insp.ListActiveTasks("default", asynq.PageSize(100))
	must(err)
	orphans := map[string]bool{}
	for _, ti := range active {
		orphans[ti.ID] = true
	}
	// B gets a task of every SKU, whatever A ran before the kill: the
	// take-over measured below needs B to want each of A's SKUs.
	for sku := range nSKUs {
		a := adjustment{ID: len(ids), SKU: fmt.Sprintf("SKU-%d", sku), Delta: 1}
		expected[a.SKU] += a.Delta
		ids = append(ids, fmt.Sprintf("adj-%02d", a.ID))
		payload, _ := json.Marshal(a)
		if _, err := client.Enqueue(asynq.NewTask(taskType, payload), asynq.TaskID(ids[a.ID])); err != nil {
			t.Fatal(err)
		}
	}
	must(b.send("go"))
	cut := trace.kill("A", killed, markers(t, env, ids))
	pre, post := 0, 0
	for _, s := range cut {
		if s.Aborted() {
			pre++
		} else {
			post++
		}
		if !orphans[strings.TrimPrefix(s.Holder, "A/")] {
			t.Fatalf("task %s was in its section when A was killed but is not active in asynq", s.Holder)
		}
	}
	t.Logf("A killed with %d tasks in their sections (%d before the commit, %d after) and %d active in asynq", len(cut), pre, post, len(orphans))

	orphaned, reclaimed, backoff := reclaimOrphans(t, insp, orphans, killedAt, c)

	// Every task applied, the queue drained, B and C shut down cleanly.
	deadline = time.Now().Add(30 * time.Second)
	for {
		m := markers(t, env, ids)
		if len(m) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks applied 30s after they were reclaimed", len(m), len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
	qi := waitQueueEmpty(t, insp, 30*time.Second)
	for i, p := range []*workerProc{b, c} {
		if err := p.send("stop"); err != nil {
			<-p.done
			t.Fatalf("worker %s: %v (exit: %v); stderr: %s", p.cfg.ID, err, p.err, stderrTail(p.stderr.String()))
		}
		_, err := p.wait(30 * time.Second)
		must(err)
		<-followed[i+1]
	}

	// The verdict: from the store (markers, log, stock) and from the
	// sections of every run (checker).
	applied := markers(t, env, ids)
	logged, err := env.client.LRange(ctx, env.prefix+logKey, 0, -1).Result()
	must(err)
	perTask := map[string]int{}
	for _, id := range logged {
		perTask[id]++
	}
	lostTasks, doubled, redelivered := 0, 0, 0
	for _, id := range ids {
		switch n := perTask[id]; {
		case n == 0:
			lostTasks++
		case n > 1:
			doubled += n - 1
		}
		if runs, _ := env.client.Get(ctx, env.prefix+runsKey+id).Int(); runs > 1 {
			redelivered++
		}
	}
	h := trace.history()
	h.Final = map[string]string{}
	var unitsOff int64
	for sku, want := range expected {
		v, err := env.client.Get(ctx, env.prefix+stockKey+sku).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		h.Final[sku] = v
		got, _ := strconv.ParseInt(v, 10, 64)
		unitsOff += max(got-want, want-got)
	}
	h.Events = []checker.Event{{At: killed, What: "SIGKILL worker A"}}
	r := checker.Check(h)
	recovery := time.Duration(trace.lastEnd() - killed)
	handover := trace.handover(cut, killed, stampOf(reclaimed))
	dedups := trace.dedupCount()

	slices.Sort(backoff)
	wouldRun := "–"
	if len(backoff) > 0 {
		wouldRun = fmt.Sprintf("%v-%v", backoff[0].Round(time.Second), backoff[len(backoff)-1].Round(time.Second))
	}
	handed := "never measured (no surviving task on those SKUs)"
	if handover > 0 {
		handed = roundDuration(handover).String() + " after the kill"
	}
	report.Add(Row{
		Scenario:   fmt.Sprintf("asynq worker processes (worker.New, concurrency 8): %d tasks over %d SKUs, 5 nodes", len(ids), nSKUs),
		Fault:      "a worker SIGKILLed while several of its tasks are inside their critical sections",
		Ops:        len(applied),
		Violations: r.Safety(),
		Lost:       lostTasks + r.Lost,
		Duplicated: doubled + r.Duplicated,
		Recovery:   recovery,
		Notes: fmt.Sprintf("3 processes: A killed with %d tasks in their sections (%d before their commit, %d after it) and %d more waiting for their SKU; "+
			"B running from the kill on; C started once asynq could reclaim A's tasks. "+
			"The handler is idempotent by task ID (under the lock: check the task's marker, read the stock, write stock, marker and log in one MULTI/EXEC). "+
			"A's locks (TTL %v) expired and B took its SKUs over %s; A's tasks were orphaned %v after the kill and reclaimed by asynq's recoverer at %v "+
			"(lease 30s + 30s margin: the floor of this recovery), their retry backoff (asynq would have run them %s later) skipped with Inspector.RunTask. "+
			"%d tasks reached their handler twice; %d of these second runs found the task's marker (A was killed after the commit) and did nothing; "+
			"every task applied exactly once, stock exact (%d units off); %s",
			len(cut), pre, post, len(orphans)-len(cut), proofTTL, handed, orphaned.Sub(killedAt).Round(100*time.Millisecond),
			reclaimed.Sub(killedAt).Round(100*time.Millisecond), wouldRun, redelivered, dedups, unitsOff, r),
	})

	if !r.OK() {
		t.Fatalf("checker: %s; first violation: %s; evidence in %s", r, r.Violations[0].Detail, keepEvidence(t, h, r))
	}
	if lostTasks+doubled != 0 || unitsOff != 0 {
		t.Fatalf("%d tasks lost, %d applied twice, stock %d units off (log %v)", lostTasks, doubled, unitsOff, perTask)
	}
	if qi.Archived != 0 {
		t.Fatalf("%d tasks archived", qi.Archived)
	}
	if dedups < post {
		t.Fatalf("%d tasks were killed after their commit but only %d redeliveries found their marker", post, dedups)
	}
	if handover > 10*time.Second {
		t.Fatalf("the killed worker's SKUs passed to the surviving worker %v after the kill", handover)
	}
	t.Logf("recovered in %v (orphaned at +%v, reclaimed at +%v, backoff skipped %s); handover %v; %d redelivered, %d dedups; %s",
		recovery, orphaned.Sub(killedAt), reclaimed.Sub(killedAt), wouldRun, handover, redelivered, dedups, r)
}

// markers returns the "applied" markers of the tasks that have one.
func markers(t *testing.T, env *proofEnv, ids []string) map[string]string {
	t.Helper()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = env.prefix + appliedKey + id
	}
	vals, err := env.client.MGet(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			m[ids[i]] = s
		}
	}
	return m
}

// taskTrace follows the events of task workers (proof_taskworker_test.go)
// and turns them into the critical sections of a checker history: one per
// run of a task under its lock, from the handler's start to just before the
// release, reading the SKU's stock and writing the new one.
type taskTrace struct {
	mu       sync.Mutex
	open     map[string]map[string]*checker.Section // worker -> task ID -> running section
	sections []checker.Section                      // ended
	dedups   int
	last     int64 // latest end of a run
}

func newTaskTrace() *taskTrace {
	return &taskTrace{open: map[string]map[string]*checker.Section{}}
}

// follow records the events of worker name until its stdout ends; the
// channel returned is closed then.
func (tr *taskTrace) follow(name string, w *workerProc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.events {
			tr.add(name, e)
		}
	}()
	return done
}

func (tr *taskTrace) add(name string, e workerEvent) {
	f := strings.Fields(e.Value)
	if len(f) == 0 {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	open := tr.open[name]
	if open == nil {
		open = map[string]*checker.Section{}
		tr.open[name] = open
	}
	id := f[0]
	switch e.Event {
	case "section": // id sku [read]
		s := &checker.Section{Holder: name + "/" + id, Start: e.At, Fence: e.Fence}
		if len(f) > 1 {
			s.Resource = f[1]
		}
		if len(f) > 2 {
			s.Read = f[2]
		}
		open[id] = s
	case "applied": // id sku wrote
		if s := open[id]; s != nil && len(f) > 2 {
			s.Wrote = f[2]
		}
	case "done", "abort":
		if s := open[id]; s != nil {
			s.End = e.At
			if e.Event == "abort" {
				s.Note = "aborted: " + e.Err
			}
			tr.sections = append(tr.sections, *s)
			delete(open, id)
		}
		tr.last = max(tr.last, e.At)
	case "dedup":
		tr.dedups++
		tr.last = max(tr.last, e.At)
	}
}

// inSection counts worker name's tasks in their sections, before and after
// their commit.
func (tr *taskTrace) inSection(name string) (pre, post int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, s := range tr.open[name] {
		if s.Aborted() {
			pre++
		} else {
			post++
		}
	}
	return pre, post
}

// kill ends worker name's running sections at at, when it was killed, and
// returns them. A section whose commit landed but whose "applied" line was
// lost in the kill is recognised by its task's marker, which names the
// worker that wrote it.
func (tr *taskTrace) kill(name string, at int64, markers map[string]string) []checker.Section {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var cut []checker.Section
	for _, id := range slices.Sorted(maps.Keys(tr.open[name])) {
		s := tr.open[name][id]
		if v, ok := strings.CutPrefix(markers[id], name+" "); ok && s.Aborted() {
			s.Wrote = v
		}
		s.End, s.Note = at, "killed"
		cut = append(cut, *s)
		tr.sections = append(tr.sections, *s)
	}
	delete(tr.open, name)
	return cut
}

// history returns the ended sections.
func (tr *taskTrace) history() checker.History {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return checker.History{Sections: slices.Clone(tr.sections)}
}

func (tr *taskTrace) lastEnd() int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.last
}

func (tr *taskTrace) dedupCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.dedups
}

// handover returns how long after at the last of the resources of cut was
// next held, counting only the sections that began before until (0 if none
// did).
func (tr *taskTrace) handover(cut []checker.Section, at, until int64) time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var worst time.Duration
	for _, k := range cut {
		first := int64(0)
		for _, s := range tr.sections {
			if s.Resource == k.Resource && s.Start > at && s.Start < until && (first == 0 || s.Start < first) {
				first = s.Start
			}
		}
		if first != 0 {
			worst = max(worst, time.Duration(first-at))
		}
	}
	return worst
}
