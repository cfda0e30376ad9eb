package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

var (
	mwWorkers = flag.Int("bench.mwworkers", 16,
		"asynq Concurrency of the one server of BenchmarkMiddlewareThroughput")
	mwWork = flag.Duration("bench.mwwork", 0,
		"extra work (a sleep) of the BenchmarkMiddlewareThroughput handler before its INCRBY")
	mwWindow = flag.Duration("bench.mwwindow", time.Hour,
		"completion window of the locked variants of BenchmarkMiddlewareThroughput and MiddlewareTurns (0: no completion records)")
	hotMixServers = flag.Int("bench.hotmixservers", 3,
		"asynq servers (each with its own lock client, Concurrency 8) of BenchmarkMiddlewareHotMix")
	hotMixPace = flag.Duration("bench.hotmixpace", time.Millisecond,
		"time between two enqueue slots of BenchmarkMiddlewareHotMix: task i of with-hot is enqueued i slots after the first, and cold-only enqueues its cold tasks at the same times (0: as fast as possible)")
	hotMixWork = flag.Duration("bench.hotmixwork", 2*time.Millisecond,
		"the BenchmarkMiddlewareHotMix handler's work (a sleep) between its read and its write: longer work means fewer lock turns a second for the same backlog")
	hotMixRounds = flag.Int("bench.hotmixrounds", 1,
		"rounds of BenchmarkMiddlewareHotMix, each running the selected sub-benchmarks in turn (alternated, unlike -count)")
	hotMixTaskCheck = flag.String("bench.hotmixtaskcheck", "",
		"WORKER_TASK_CHECK_INTERVAL of the worker.New variants of BenchmarkMiddlewareHotMix (empty: the worker's default)")
)

const (
	// mwLimit bounds every wait of the middleware benchmarks: enqueueing,
	// processing, draining.
	mwLimit = 2 * time.Minute
	// hotMixConcurrency is the Concurrency of each hot-mix server.
	hotMixConcurrency = 8
	// hotMixCold cold tasks over hotMixColdSKUs SKUs (10 each), and as many
	// hot tasks on one SKU in with-hot.
	hotMixCold     = 500
	hotMixColdSKUs = 50
	hotSKU         = "HOT"
)

// threeHot are the hot SKUs of with-3-hot; the first is hotSKU, the one
// measured.
var threeHot = []string{hotSKU, "HOT-2", "HOT-3"}

// tally counts a run's completed tasks and closes done when the last one of
// total completes. A task that completes twice (asynq delivers at least
// once) counts once more in dups.
type tally struct {
	total int
	mu    sync.Mutex
	seen  []int           // completions per task id
	at    []time.Time     // first completion per task id
	began []time.Time     // when the handler run that completed first began
	waits []time.Duration // how long that run waited for its lock
	n     int             // distinct tasks completed
	dups  int
	done  chan struct{}
	fails atomic.Int64
	first atomic.Pointer[string] // first handler error
}

func newTally(total int) *tally {
	return &tally{total: total, seen: make([]int, total), at: make([]time.Time, total), began: make([]time.Time, total), waits: make([]time.Duration, total), done: make(chan struct{})}
}

// begin notes that a run of task id that is about to complete began at at,
// after waiting for its lock for wait.
func (t *tally) begin(id int, at time.Time, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id >= 0 && id < t.total && t.seen[id] == 0 {
		t.began[id], t.waits[id] = at, wait
	}
}

func (t *tally) complete(id int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id < 0 || id >= t.total {
		return
	}
	t.seen[id]++
	if t.seen[id] > 1 {
		t.dups++
		return
	}
	t.at[id] = at
	if t.n++; t.n == t.total {
		close(t.done)
	}
}

func (t *tally) fail(err error) {
	t.fails.Add(1)
	msg := err.Error()
	t.first.CompareAndSwap(nil, &msg)
}

func (t *tally) firstErr() string {
	if p := t.first.Load(); p != nil {
		return *p
	}
	return ""
}

func (t *tally) distinct() (n, dups int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.dups
}

// wait waits for every task, at most limit.
func (t *tally) wait(limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-t.done:
		return nil
	case <-timer.C:
		n, _ := t.distinct()
		return fmt.Errorf("only %d of %d tasks done after %v (%d handler errors, first: %q)", n, t.total, limit, t.fails.Load(), t.firstErr())
	}
}

// enqueue submits tasks[i] for every i in order, stamping each one's time
// just before its Enqueue call in at (if not nil).
func enqueue(b *testing.B, c *asynq.Client, queue string, tasks []adjustment, at []time.Time, due []time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), mwLimit)
	defer cancel()
	start := time.Now()
	for i, a := range tasks {
		if due != nil {
			time.Sleep(time.Until(start.Add(due[i])))
		}
		if at != nil {
			at[i] = time.Now()
		}
		if _, err := c.EnqueueContext(ctx, a.task(), asynq.Queue(queue)); err != nil {
			b.Fatalf("enqueue task %d of %d: %v", i, len(tasks), err)
		}
	}
}

// BenchmarkMiddlewareThroughput measures tasks per second through one asynq
// server (Concurrency -bench.mwworkers, 16) with and without the lock
// middleware (and with it behind worker.TraceTasks while no tracer
// provider is set: tracing off), on the same broker, store and 5 lock nodes. Every task has its
// own SKU, so the lock never conflicts: the difference is the cost of one
// TryAcquire, one KeepAlive and one Release per task, plus the middleware's
// own work (ByField decodes the payload again). The handler decodes the
// payload and INCRBYs the SKU's stock on the store: one round trip, the
// smallest realistic task (-bench.mwwork adds a sleep before it). b.N tasks
// are enqueued first, outside the timer; the timer covers starting the
// server and processing all of them. Run with -benchtime=3000x. Besides
// tasks/s it reports the CPU time per task of this process (go-cpu-µs/task:
// asynq, the handler, the middleware and lock client) and of the 7
// redis-servers (redis-cpu-µs/task), to show where the lock's cost goes.
func BenchmarkMiddlewareThroughput(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	broker, store := redistest.StartNode(b), redistest.StartNode(b)
	pinApart(b, "bench.pinlocks", *pinLocks, cluster.Nodes, []*redistest.Node{broker, store})
	for _, v := range []struct {
		name           string
		locked, traced bool
	}{{"plain", false, false}, {"locked", true, false}, {"locked-tasktrace", true, true}} {
		b.Run(v.name, func(b *testing.B) { runThroughput(b, cluster, broker, store, v.name, v.locked, v.traced) })
	}
}

// runThroughput is one variant: plain, locked, or locked with
// worker.TraceTasks(nil) outermost as the worker runs it, with no
// tracer provider set (tracing off).
func runThroughput(b *testing.B, cluster *redistest.Cluster, broker, store *redistest.Node, name string, locked, traced bool) {
	b.ReportAllocs()
	f := throughput(b, cluster, broker, store, name, locked, traced, b.N, true)
	b.ReportMetric(f.tasksPerSec, "tasks/s")
	b.ReportMetric(f.goCPU, "go-cpu-µs/task")
	b.ReportMetric(f.redisCPU, "redis-cpu-µs/task")
}

// throughputFigures are one run's tasks per second and CPU time per task
// of this process and of the redis-servers.
type throughputFigures struct{ tasksPerSec, goCPU, redisCPU float64 }

// throughput runs n tasks of one variant through a fresh server and checks
// them; timed says whether b's timer covers the run (the benchmark's own
// run) or not (one run of several).
func throughput(b *testing.B, cluster *redistest.Cluster, broker, store *redistest.Node, name string, locked, traced bool, n int, timed bool) throughputFigures {
	flush(b, broker, store)
	queue := freshQueue(name)
	lockPrefix := "mw:" + queue + ":"
	// The same setup for both variants: a warm lock client exists in both,
	// only locked uses it.
	rc := newRedlock(b, cluster, redlock.WithPrefix(lockPrefix))
	warmLocks(b, rc, "")
	st := nodeClient(b, store)
	if err := st.Ping(b.Context()).Err(); err != nil {
		b.Fatalf("store: %v", err)
	}
	enq := asynqClient(b, broker)

	var h asynq.Handler = asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		a, err := decode(t)
		if err != nil {
			return err
		}
		if *mwWork > 0 {
			time.Sleep(*mwWork)
		}
		return st.IncrBy(ctx, "stock:"+a.SKU, a.Delta).Err()
	})
	var conflicts counter
	if locked {
		h = middleware.Lock(rc, middleware.ByField("sku"), middleware.WithObserver(conflicts.observe), middleware.WithCompletionWindow(*mwWindow))(h)
	}
	if traced {
		h = worker.TraceTasks(nil)(h)
	}
	// Outermost in both variants, so that a task counts once its lock's
	// release is sent (the middleware does not wait for the nodes' answers,
	// docs/guide/MIDDLEWARE.md); it decodes the payload once more, in both.
	ty := newTally(n)
	counted := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := h.ProcessTask(ctx, t)
		if err != nil {
			ty.fail(err)
			return err
		}
		if a, err := decode(t); err == nil {
			ty.complete(a.ID, time.Now())
		}
		return nil
	})

	tasks := make([]adjustment, n)
	for i := range tasks {
		tasks[i] = adjustment{ID: i, SKU: "SKU-" + strconv.Itoa(i), Delta: 1}
	}
	enqueue(b, enq, queue, tasks, nil, nil)
	srv := newServer(b, broker, serverConfig(queue, *mwWorkers))
	servers := append([]*redistest.Node{broker, store}, cluster.Nodes...)
	runtime.GC()
	srvCPU0, cpu0 := serversCPU(b, servers...), processCPU()

	if timed {
		b.ResetTimer()
	}
	start := time.Now()
	if err := srv.Start(counted); err != nil {
		b.Fatalf("start server: %v", err)
	}
	err := ty.wait(mwLimit)
	elapsed := time.Since(start)
	if timed {
		b.StopTimer()
	}
	cpu1, srvCPU1 := processCPU(), serversCPU(b, servers...)
	if err != nil {
		b.Fatal(err)
	}
	srv.Shutdown()

	qi := drained(b, broker, queue, mwLimit)
	if f := ty.fails.Load(); f != 0 {
		b.Fatalf("%d handler errors, first: %s", f, ty.firstErr())
	}
	if c := conflicts.total(); c != 0 {
		b.Fatalf("%d conflicts on distinct keys", c)
	}
	if _, dups := ty.distinct(); dups != 0 || qi.Archived != 0 {
		b.Fatalf("%d tasks completed twice, %d archived", dups, qi.Archived)
	}
	if keys, err := st.DBSize(b.Context()).Result(); err != nil || keys != int64(n) {
		b.Fatalf("store holds %d keys (err %v), want %d", keys, err, n)
	}
	return throughputFigures{
		tasksPerSec: float64(n) / elapsed.Seconds(),
		goCPU:       micros(cpu1-cpu0) / float64(n),
		redisCPU:    micros(srvCPU1-srvCPU0) / float64(n),
	}
}

// BenchmarkMiddlewareTurns is MiddlewareThroughput's plain and locked
// variants taking turns, b.N tasks each, for alternatedRounds rounds: a
// VM's speed drifts between two sub-benchmarks, much less between two turns
// of a round. Reports the medians over the rounds of locked's process CPU
// per task over plain's (cpu-x-plain) and of its tasks/s over plain's
// (tasks-x-plain). Run with -benchtime=3000x.
func BenchmarkMiddlewareTurns(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	broker, store := redistest.StartNode(b), redistest.StartNode(b)
	pinApart(b, "bench.pinlocks", *pinLocks, cluster.Nodes, []*redistest.Node{broker, store})
	var cpu, rate []float64
	for range alternatedRounds {
		p := throughput(b, cluster, broker, store, "plain", false, false, b.N, false)
		l := throughput(b, cluster, broker, store, "locked", true, false, b.N, false)
		cpu = append(cpu, l.goCPU/p.goCPU)
		rate = append(rate, l.tasksPerSec/p.tasksPerSec)
	}
	b.ReportMetric(median(cpu), "cpu-x-plain")
	b.ReportMetric(median(rate), "tasks-x-plain")
}

// inventory is the hot-mix handler: it reads the SKU's stock, works
// hotMixWork (a sleep), and writes the stock back. Two runs on one SKU at
// once would lose an update; the lock prevents it.
type inventory struct {
	store *redis.Client
	ty    *tally
	hot   hotSpan
	trips *hotTrips // when each hot run reached the middleware
	keys  keyRuns   // the runs of every hot SKU
}

func (inv *inventory) ProcessTask(ctx context.Context, t *asynq.Task) error {
	begin := time.Now()
	a, err := decode(t)
	if err != nil {
		return err
	}
	id, _ := asynq.GetTaskID(ctx)
	if slices.Contains(threeHot, a.SKU) {
		start := time.Now()
		defer func() {
			end := time.Now()
			inv.keys.add(a.SKU, start, end)
			if a.SKU == hotSKU {
				inv.hot.add(serverOf(ctx), inv.trips.enteredAt(id), inv.trips.acquiredAt(id), start, end)
			}
		}()
	}
	key := "stock:" + a.SKU
	v, err := inv.store.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	time.Sleep(*hotMixWork)
	if err := inv.store.Set(ctx, key, v+a.Delta, 0).Err(); err != nil {
		return err
	}
	inv.ty.begin(a.ID, begin, inv.trips.waitOf(id))
	inv.ty.complete(a.ID, time.Now())
	return nil
}

// BenchmarkMiddlewareHotMix measures how a hot SKU delays cold ones and how
// busy it keeps its lock. The same 500 cold tasks (10 on each of 50 SKUs) run
// alone (cold-only), interleaved with 500 tasks on SKUs of their own
// (with-spread: the same extra load without a hot SKU), and interleaved
// with 500 tasks on one hot SKU (with-hot), through -bench.hotmixservers (3)
// workers built by worker.New with its defaults (parking on, Wait 2s;
// concurrency 8, metrics off), each with its own lock client, as separate
// processes would have. bare-with-hot runs the with-hot workload on asynq
// servers with asynq's default Config (concurrency 8) and a bare
// middleware.Lock(lc, ByField("sku")). plain-with-3-hot runs the
// with-3-hot workload on asynq servers configured as worker.New configures
// them, with no lock: the baseline of the cold tasks' latency (its hot tasks
// run side by side and lose updates, so its stock is not checked). The
// servers run before the first task is enqueued. Task i is enqueued i slots (-bench.hotmixpace, 1ms)
// after the first, so every variant's cold tasks arrive at the same times.
// The handler reads the stock, works 2ms, writes it back. A cold task's
// latency runs from just before its Enqueue call to the end of its handler.
// go-cpu-ms, lock-cpu-ms and broker-cpu-ms are the CPU time of this process,
// of the 5 lock nodes and of the broker and store over the run.
// hot-busy-% is the sum of
// the hot handlers' run times over the span from the first hot start to the
// last hot end; requeues/hot-task counts the hot tasks' trips through asynq
// (parked, requeued, resubmitted) per hot task. Where the hot lock's idle
// time goes: same-server-% is the share of hot runs that followed one on the
// same server (a local hand-over), gap-same-ms and gap-other-ms the mean time
// from one hot run's end to the next one's start in either case, starved-%
// the share of hot runs that reached the middleware only after the previous
// one ended (nobody was waiting). Every SKU's stock is checked
// at the end (no lost update). The workload is fixed, whatever b.N is: run
// with -benchtime=1x.
func BenchmarkMiddlewareHotMix(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	broker, store := redistest.StartNode(b), redistest.StartNode(b)
	pinApart(b, "bench.pin", *pinCPUs, append([]*redistest.Node{broker, store}, cluster.Nodes...), nil)
	for range max(1, *hotMixRounds) {
		var round hotMixRound
		for _, name := range []string{"cold-only", "with-spread", "with-hot", "with-3-hot", "bare-with-hot", "plain-with-3-hot"} {
			b.Run(name, func(b *testing.B) { runHotMix(b, cluster, broker, store, name, &round) })
		}
	}
}

// hotMixRound carries figures from one variant of a round of
// BenchmarkMiddlewareHotMix to a later one: plain-with-3-hot reports
// with-3-hot's cold p99 over its own (with-3-hot-cold-p99-x), the two run
// side by side.
type hotMixRound struct {
	with3HotColdP99 time.Duration
}

// hotMixTasks is the workload of a HotMix variant: task i of with-hot is hot
// for even i and cold for odd i, due i slots after the first enqueue;
// with-spread puts its even tasks on SKUs of their own; with-3-hot has as
// many hot tasks, on three hot SKUs, but gives each SKU a task at every even
// slot (three a slot) until they are all due: each hot lock has as much
// waiting for it as with-hot's one, for a third of the time (hot-busy-% and
// the gaps are those of the first, HOT; the three are alike); cold-only
// keeps the odd ones, the same cold tasks at the same times.
func hotMixTasks(name string) (tasks []adjustment, due []time.Duration, expected map[string]int64) {
	expected = map[string]int64{}
	add := func(i int, sku string) {
		due = append(due, time.Duration(i)**hotMixPace)
		tasks = append(tasks, adjustment{ID: len(tasks), SKU: sku, Delta: 1})
		expected[sku]++
	}
	for i := range 2 * hotMixCold {
		switch {
		case i%2 == 1:
			add(i, fmt.Sprintf("COLD-%02d", i%(2*hotMixColdSKUs)/2))
		case name == "cold-only":
		case name == "with-spread":
			add(i, fmt.Sprintf("SPREAD-%03d", i/2))
		case strings.HasSuffix(name, "with-3-hot"):
			for j := i / 2 * len(threeHot); j < min(hotMixCold, (i/2+1)*len(threeHot)); j++ {
				add(i, threeHot[j%len(threeHot)])
			}
		default:
			add(i, hotSKU)
		}
	}
	return tasks, due, expected
}

// hotMixCPU is the CPU time of this process, the lock nodes and the broker
// and store.
type hotMixCPU struct{ proc, lock, broker time.Duration }

func readHotMixCPU(b *testing.B, cluster *redistest.Cluster, broker, store *redistest.Node) hotMixCPU {
	return hotMixCPU{processCPU(), serversCPU(b, cluster.Nodes...), serversCPU(b, broker, store)}
}

func runHotMix(b *testing.B, cluster *redistest.Cluster, broker, store *redistest.Node, name string, round *hotMixRound) {
	flush(b, broker, store)
	queue := freshQueue(name)
	tasks, due, expected := hotMixTasks(name)
	ty := newTally(len(tasks))
	inv := &inventory{store: nodeClient(b, store), ty: ty, trips: &hotTrips{}}
	if err := inv.store.Ping(b.Context()).Err(); err != nil {
		b.Fatalf("store: %v", err)
	}
	startServers := startWorkers
	switch name {
	case "bare-with-hot":
		startServers = startBare
	case "plain-with-3-hot":
		startServers = startPlain
	}
	startServers(b, cluster, broker, queue, "mw:"+queue+":", inv, inv.trips.observe, ty.fail)
	enq := asynqClient(b, broker)
	enqAt := make([]time.Time, len(tasks))

	cpu0 := readHotMixCPU(b, cluster, broker, store)
	b.ResetTimer()
	start := time.Now()
	enqueue(b, enq, queue, tasks, enqAt, due)
	enqueued := time.Since(start)
	err := ty.wait(mwLimit)
	b.StopTimer()
	cpu1 := readHotMixCPU(b, cluster, broker, store)
	if err != nil {
		b.Fatal(err)
	}
	if name == "plain-with-3-hot" {
		expected = nil // no lock: its hot tasks lose updates
	}
	checkHotMix(b, broker, queue, inv, expected)
	switch p99 := reportCold(b, tasks, ty, enqAt, start); {
	case name == "with-3-hot":
		round.with3HotColdP99 = p99
	case name == "plain-with-3-hot" && round.with3HotColdP99 > 0:
		b.ReportMetric(float64(round.with3HotColdP99)/float64(p99), "with-3-hot-cold-p99-x")
	}
	b.ReportMetric(millis(enqueued), "enqueue-ms")
	b.ReportMetric(millis(behind(enqAt, due, start)), "enqueue-late-ms")
	// The enqueuer's lag: the rate it was asked for against the one it
	// kept (a saturated process enqueues late).
	if last := due[len(due)-1]; last > 0 {
		b.ReportMetric(float64(len(tasks))/last.Seconds(), "offered-tasks/s")
	}
	b.ReportMetric(float64(len(tasks))/enqueued.Seconds(), "enqueued-tasks/s")
	b.ReportMetric(millis(cpu1.proc-cpu0.proc), "go-cpu-ms")
	b.ReportMetric(millis(cpu1.lock-cpu0.lock), "lock-cpu-ms")
	b.ReportMetric(millis(cpu1.broker-cpu0.broker), "broker-cpu-ms")
	if strings.HasSuffix(name, "-hot") && name != "plain-with-3-hot" {
		reportHot(b, tasks, ty.at, start, inv)
		reportHotKeys(b, tasks, enqAt, ty.at, &inv.keys)
	}
	if f := ty.fails.Load(); f != 0 {
		b.Logf("%d handler failures (retried by asynq), first: %s", f, ty.firstErr())
	}
}

// behind returns how late the latest enqueue was against its slot.
func behind(at []time.Time, due []time.Duration, start time.Time) time.Duration {
	var late time.Duration
	for i, t := range at {
		late = max(late, t.Sub(start)-due[i])
	}
	return late
}

// checkHotMix fails the run if a task was archived or completed twice, or
// a SKU's stock is off.
func checkHotMix(b *testing.B, broker *redistest.Node, queue string, inv *inventory, expected map[string]int64) {
	qi := drained(b, broker, queue, mwLimit)
	if qi.Archived != 0 {
		b.Fatalf("%d tasks archived", qi.Archived)
	}
	var off int64
	for sku, want := range expected {
		got, err := inv.store.Get(b.Context(), "stock:"+sku).Int64()
		if err != nil {
			b.Fatalf("stock of %s: %v", sku, err)
		}
		off += max(got-want, want-got)
	}
	if _, dups := inv.ty.distinct(); off != 0 || dups != 0 {
		b.Fatalf("stock off by %d units in all; %d tasks completed twice", off, dups)
	}
}

// reportCold reports the cold tasks' latencies, enqueue to completion.
// reportCold reports the cold tasks' latencies and returns their p99.
func reportCold(b *testing.B, tasks []adjustment, ty *tally, enqAt []time.Time, start time.Time) time.Duration {
	var cold, taken, locked, ran []time.Duration
	var coldDone time.Duration
	for i, a := range tasks {
		if strings.HasPrefix(a.SKU, "COLD-") {
			cold = append(cold, ty.at[i].Sub(enqAt[i]))
			coldDone = max(coldDone, ty.at[i].Sub(start))
			taken = append(taken, ty.began[i].Sub(enqAt[i])-ty.waits[i])
			locked = append(locked, ty.waits[i])
			ran = append(ran, ty.at[i].Sub(ty.began[i]))
		}
	}
	s := sortedCopy(cold)
	b.ReportMetric(millis(percentile(s, 0.50)), "cold-p50-ms")
	b.ReportMetric(millis(percentile(s, 0.99)), "cold-p99-ms")
	b.ReportMetric(millis(s[len(s)-1]), "cold-max-ms")
	b.ReportMetric(coldDone.Seconds(), "cold-done-s")
	// Where a cold task's time goes: from its enqueue to the middleware
	// (asynq's pick-up), waiting for its lock, and its handler's run.
	b.ReportMetric(millis(percentile(sortedCopy(taken), 0.99)), "cold-pickup-p99-ms")
	b.ReportMetric(millis(percentile(sortedCopy(locked), 0.99)), "cold-lock-p99-ms")
	b.ReportMetric(millis(percentile(sortedCopy(ran), 0.99)), "cold-run-p99-ms")
	return percentile(s, 0.99)
}

// reportHot reports how the hot SKU's tasks ran.
func reportHot(b *testing.B, tasks []adjustment, done []time.Time, start time.Time, inv *inventory) {
	var hotDone time.Duration
	for i, a := range tasks {
		if a.SKU == hotSKU {
			hotDone = max(hotDone, done[i].Sub(start))
		}
	}
	b.ReportMetric(hotDone.Seconds(), "hot-done-s")
	b.ReportMetric(inv.hot.percent(), "hot-busy-%")
	local, remote, starved, lgap, rgap := inv.hot.gaps()
	b.ReportMetric(100*float64(starved)/float64(max(1, local+remote)), "starved-%")
	b.ReportMetric(100*float64(local)/float64(max(1, local+remote)), "same-server-%")
	b.ReportMetric(millis(lgap), "gap-same-ms")
	b.ReportMetric(millis(rgap), "gap-other-ms")
	b.ReportMetric(millis(inv.hot.remoteGapP50()), "gap-other-p50-ms")
	toLock, toStart := inv.hot.gapSplit()
	b.ReportMetric(millis(toLock), "gap-to-lock-ms")
	b.ReportMetric(millis(toStart), "gap-lock-to-run-ms")
	trips := inv.trips
	trips.mu.Lock()
	defer trips.mu.Unlock()
	b.ReportMetric(float64(trips.trips)/float64(hotMixCold), "requeues/hot-task")
	b.ReportMetric(float64(trips.promoted), "promotions")
	b.Logf("hot conflicts by action: %v; cold: %v; hand-overs: %v", trips.actions, trips.cold, trips.handover)
}
