package integration

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// Scheduler tests: 3 replicas, each with its own cron and its own redlock
// client, over the same 5 redis-server nodes, on a per-second schedule.
// The tests run in parallel; each takes about 12-15s.

const (
	cronSpec = "* * * * * *"
	cronRun  = 12 * time.Second // ≥ 10 ticks
)

var cronQuiet = scheduler.WithLogger(slog.New(slog.DiscardHandler))

// cronLockClient is one replica's lock client.
func cronLockClient(t *testing.T, c *redistest.Cluster) *redlock.Client {
	return lockClient(t, c, redlock.WithNodeTimeout(300*time.Millisecond))
}

// cronRunSpan is one run of a job.
type cronRunSpan struct {
	replica    int
	tick       time.Time
	start, end time.Time
	cause      error
}

// cronLedger records the runs of one job across replicas.
type cronLedger struct {
	mu       sync.Mutex
	runs     []cronRunSpan
	events   []scheduler.Event
	inside   atomic.Int32
	overlaps atomic.Int32
	started  chan cronRunSpan // a run began (buffered, dropped when full)
}

func newCronLedger() *cronLedger { return &cronLedger{started: make(chan cronRunSpan, 64)} }

func (l *cronLedger) observe(e scheduler.Event) {
	if e.Outcome == scheduler.OutcomeClock {
		return // a clock measurement, not a run
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *cronLedger) count(o scheduler.Outcome) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

// job is replica's job: it records itself and runs for work or until its
// context ends.
func (l *cronLedger) job(replica int, work time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		info, _ := scheduler.FromContext(ctx)
		if l.inside.Add(1) > 1 {
			l.overlaps.Add(1)
		}
		s := cronRunSpan{replica: replica, tick: info.Tick, start: time.Now()}
		select {
		case l.started <- s:
		default:
		}
		if work > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(work):
			}
		}
		s.end = time.Now()
		l.inside.Add(-1)
		s.cause = context.Cause(ctx)
		l.mu.Lock()
		l.runs = append(l.runs, s)
		l.mu.Unlock()
		return s.cause
	}
}

func (l *cronLedger) spans() []cronRunSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.runs)
	slices.SortFunc(out, func(a, b cronRunSpan) int { return a.start.Compare(b.start) })
	return out
}

// perTick counts runs per tick (Unix ms).
func (l *cronLedger) perTick() map[int64]int {
	m := map[int64]int{}
	for _, s := range l.spans() {
		m[s.tick.UnixMilli()]++
	}
	return m
}

// checkOnce asserts that no tick ran twice and that the ticks strictly
// inside (from, to) ran, all but at most 2 (a loaded machine may make every
// replica skip a tick, late past the skew; those are logged). It returns
// the number of ticks inside.
func checkOnce(t *testing.T, what string, runs map[int64]int, from, to time.Time) int {
	t.Helper()
	for tick, n := range runs {
		if n > 1 {
			t.Errorf("%s: tick %s ran %d times", what, time.UnixMilli(tick).Format(time.TimeOnly+".000"), n)
		}
	}
	checked, missed := 0, 0
	for tick := from.Truncate(time.Second).Add(time.Second); tick.Before(to); tick = tick.Add(time.Second) {
		checked++
		if runs[tick.UnixMilli()] == 0 {
			missed++
			t.Logf("%s: tick %s did not run", what, tick.Format(time.TimeOnly))
		}
	}
	if missed > 2 {
		t.Errorf("%s: %d of %d ticks did not run", what, missed, checked)
	}
	return checked
}

// cronScheduler starts a Scheduler replica with its own lock client; it is
// stopped at the end of the test.
func cronScheduler(t *testing.T, c *redistest.Cluster, opts ...scheduler.Option) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(cronLockClient(t, c), append([]scheduler.Option{cronQuiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// delayed delays every run of a cron job: a replica whose deliveries come
// late (or whose clock is behind).
func delayed(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			time.Sleep(d)
			j.Run()
		})
	}
}

// cronSingleton runs job on its own cron (seconds field), delayed by delay,
// under a Singleton wrapper with its own lock client.
func cronSingleton(t *testing.T, c *redistest.Cluster, name string, job cron.Job, delay time.Duration, opts ...scheduler.Option) *cron.Cron {
	t.Helper()
	w := scheduler.Singleton(cronLockClient(t, c), name, append([]scheduler.Option{cronQuiet}, opts...)...)
	cr := cron.New(cron.WithSeconds())
	if _, err := cr.AddJob(cronSpec, cron.NewChain(delayed(delay), w).Then(job)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-cr.Stop().Done() })
	return cr
}

// TestCronSingletonEachTickOnceAcrossReplicas: a 0ms job on 3 replicas, one
// of them 300ms late, runs each tick exactly once, whether the replicas use
// Scheduler or Singleton. The naive lock (per tick, released right after
// the job) runs ticks twice in the same setting: the check can fail.
func TestCronSingletonEachTickOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	skew := scheduler.WithSkew(500 * time.Millisecond)

	locked := newCronLedger()
	var scheds []*scheduler.Scheduler
	for i := range 2 {
		s := cronScheduler(t, c, skew, scheduler.WithObserver(locked.observe))
		if err := s.Register("report", cronSpec, locked.job(i, 0)); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	late := cronSingleton(t, c, "report", scheduler.Func(locked.job(2, 0)), 300*time.Millisecond, skew, scheduler.WithObserver(locked.observe))

	var naiveMu sync.Mutex
	naiveRuns := map[int64]int{}
	var naive []*cron.Cron
	for _, delay := range []time.Duration{0, 0, 300 * time.Millisecond} {
		locks := cronLockClient(t, c)
		cr := cron.New(cron.WithSeconds())
		_, err := cr.AddJob(cronSpec, cron.NewChain(delayed(delay)).Then(cron.FuncJob(func() {
			tick := time.Now().Round(time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			l, err := locks.TryAcquire(ctx, "naive:"+tick.String(), 5*time.Second)
			if err != nil {
				return
			}
			naiveMu.Lock()
			naiveRuns[tick.UnixMilli()]++
			naiveMu.Unlock()
			_ = l.Release(ctx) // the job took 0ms: release at once
		})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-cr.Stop().Done() })
		naive = append(naive, cr)
	}

	start := time.Now()
	for _, s := range scheds {
		s.Start()
	}
	late.Start()
	for _, cr := range naive {
		cr.Start()
	}
	time.Sleep(cronRun + 500*time.Millisecond)
	end := time.Now()
	for _, s := range scheds {
		if err := s.Stop(within(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	<-late.Stop().Done()
	for _, cr := range naive {
		<-cr.Stop().Done()
	}

	checked := checkOnce(t, "locked", locked.perTick(), start, end.Add(-time.Second))
	if checked < 10 {
		t.Fatalf("only %d ticks checked", checked)
	}
	twice := 0
	for tick := start.Truncate(time.Second).Add(time.Second); tick.Before(end.Add(-time.Second)); tick = tick.Add(time.Second) {
		if naiveRuns[tick.UnixMilli()] >= 2 {
			twice++
		}
	}
	if twice < checked/2 {
		t.Errorf("naive lock: only %d of %d ticks ran twice; the late replica should rerun nearly all", twice, checked)
	}
	byReplica := map[int]int{}
	for _, s := range locked.spans() {
		byReplica[s.replica]++
	}
	// A replica that could not reach the lock nodes in time, or ran later
	// than the skew on a loaded machine, skips a tick without harm (the
	// checks above decide); more than a couple would mean a problem.
	odd := 0
	for _, e := range locked.events {
		if e.Outcome != scheduler.OutcomeRan && e.Outcome != scheduler.OutcomeSkippedOtherReplica {
			odd++
			t.Logf("outcome %s at tick %s: %v", e.Outcome, e.Tick.Format(time.TimeOnly), e.Err)
		}
	}
	if odd > 2 {
		t.Errorf("%d runs neither ran nor lost to another replica", odd)
	}
	t.Logf("%d ticks each ran once (runs per replica %v); naive lock ran %d of them twice", checked, byReplica, twice)
}

// TestCronLongJobNeverOverlaps: a job of 2.5 intervals on 3 replicas never
// overlaps itself, skipping (the default) and with WithDelayIfRunning; no
// tick runs twice.
func TestCronLongJobNeverOverlaps(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	policies := []string{"skip", "delay"}
	policy := map[string][]scheduler.Option{"delay": {scheduler.WithDelayIfRunning(0)}}
	ledgers := map[string]*cronLedger{}
	var scheds []*scheduler.Scheduler
	for _, p := range policies {
		l := newCronLedger()
		ledgers[p] = l
		for i := range 3 {
			s := cronScheduler(t, c, append(policy[p], scheduler.WithSkew(300*time.Millisecond), scheduler.WithObserver(l.observe))...)
			if err := s.Register("long-"+p, cronSpec, l.job(i, 2500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
	}
	for _, s := range scheds {
		s.Start()
	}
	time.Sleep(cronRun)
	for _, s := range scheds {
		if err := s.Stop(within(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range policies {
		l := ledgers[p]
		if n := l.overlaps.Load(); n != 0 {
			t.Errorf("%s: %d overlapping runs", p, n)
		}
		spans := l.spans()
		for i := 1; i < len(spans); i++ {
			if spans[i].start.Before(spans[i-1].end) {
				t.Errorf("%s: run %d started at %s before run %d ended at %s", p, i, spans[i].start.Format(time.StampMilli), i-1, spans[i-1].end.Format(time.StampMilli))
			}
		}
		checkOnce(t, p, l.perTick(), time.Now(), time.Now()) // no tick twice
		replicas := map[int]bool{}
		for _, s := range spans {
			replicas[s.replica] = true
		}
		t.Logf("%s: %d runs on %d replicas, %d skipped for overlap, %d delayed", p, len(spans), len(replicas),
			l.count(scheduler.OutcomeSkippedOverlap), l.count(scheduler.OutcomeLate))
	}
	skip, delay := ledgers["skip"], ledgers["delay"]
	if n := len(skip.spans()); n < 3 || n > 5 {
		t.Errorf("skip: %d runs in %v, want about one every 3 ticks", n, cronRun)
	}
	if skip.count(scheduler.OutcomeSkippedOverlap) < 5 {
		t.Errorf("skip: %d ticks skipped for overlap", skip.count(scheduler.OutcomeSkippedOverlap))
	}
	if n := len(delay.spans()); n < 4 {
		t.Errorf("delay: %d runs in %v, want back-to-back runs", n, cronRun)
	}
	if delay.count(scheduler.OutcomeLate) < 2 {
		t.Errorf("delay: %d delayed runs", delay.count(scheduler.OutcomeLate))
	}
}

// TestCronReplicaDeathHandsOverTicks: the replica running a long job is cut
// off from the lock nodes (its lock client closed, as if it died): its job
// learns of the loss long before its 20s end and before the next run, and
// the following ticks run on the other replicas.
func TestCronReplicaDeathHandsOverTicks(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	l := newCronLedger()
	const ttl = time.Second
	type replica struct {
		s     *scheduler.Scheduler
		locks *redlock.Client
	}
	var reps []replica
	for i := range 3 {
		locks := cronLockClient(t, c)
		s, err := scheduler.New(locks, cronQuiet, scheduler.WithSkew(300*time.Millisecond), scheduler.WithTTL(ttl), scheduler.WithObserver(l.observe))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register("long", cronSpec, l.job(i, 20*time.Second)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(within(t, time.Second)) })
		reps = append(reps, replica{s, locks})
	}
	for _, r := range reps {
		r.s.Start()
	}
	var first cronRunSpan
	select {
	case first = <-l.started:
	case <-time.After(3 * time.Second):
		t.Fatal("no run started")
	}
	time.Sleep(1500 * time.Millisecond) // well into the run, after some extensions
	died := time.Now()
	dead := reps[first.replica]
	if err := dead.locks.Close(); err != nil { // no more extensions, no more acquisitions
		t.Fatal(err)
	}
	go func() { _ = dead.s.Stop(context.Background()) }() // its cron stops too

	var next cronRunSpan
	select {
	case next = <-l.started:
	case <-time.After(ttl + 3*time.Second):
		t.Fatalf("no tick ran within %v of the death", ttl+3*time.Second)
	}
	if next.replica == first.replica {
		t.Fatalf("the dead replica %d started a run", next.replica)
	}
	took := next.start.Sub(died)
	var firstRun cronRunSpan
	for _, s := range l.spans() {
		if s.replica == first.replica {
			firstRun = s
		}
	}
	if firstRun.end.IsZero() || !errors.Is(firstRun.cause, redlock.ErrLockLost) {
		t.Fatalf("the dead replica's job should have ended with ErrLockLost before the next run, got %+v", firstRun)
	}
	// The job is cancelled at its lock's validity end (at most a TTL after the
	// death); the bound is generous because a loaded machine delays the
	// cancelled goroutine, and the safety check is the ordering below.
	if lost := firstRun.end.Sub(died); lost > 10*ttl {
		t.Errorf("the dead replica's job learned of the loss %v after the death, not within its lock's validity (TTL %v)", lost, ttl)
	}
	if next.start.Before(firstRun.end) {
		t.Errorf("the next run started at %s, before the dead one ended at %s", next.start.Format(time.StampMilli), firstRun.end.Format(time.StampMilli))
	}
	if l.overlaps.Load() != 0 {
		t.Error("overlapping runs")
	}
	t.Logf("replica %d died %v into its run; its job stopped %v later; replica %d took tick %s %v after the death",
		first.replica, died.Sub(first.start).Round(time.Millisecond), firstRun.end.Sub(died).Round(time.Millisecond),
		next.replica, next.tick.Format(time.TimeOnly), took.Round(time.Millisecond))
}

// cronQuietAsynq drops asynq's own logs.
type cronQuietAsynq struct{}

func (cronQuietAsynq) Debug(...any) {}
func (cronQuietAsynq) Info(...any)  {}
func (cronQuietAsynq) Warn(...any)  {}
func (cronQuietAsynq) Error(...any) {}
func (cronQuietAsynq) Fatal(...any) {}

// countingEnqueuer counts the enqueues a replica makes and their results.
type countingEnqueuer struct {
	c                   *asynq.Client
	calls, ok, conflict atomic.Int64
}

func (e *countingEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	e.calls.Add(1)
	info, err := e.c.EnqueueContext(ctx, task, opts...)
	switch {
	case err == nil:
		e.ok.Add(1)
	case errors.Is(err, asynq.ErrTaskIDConflict):
		e.conflict.Add(1)
	}
	return info, err
}

// TestCronAsynqBridgeEnqueuesEachTickOnce: 3 replicas (two Schedulers with
// Register with EnqueueJob, one Singleton-wrapped EnqueueJob 300ms late) enqueue each
// tick's task once; a server processes each exactly once; a completed task
// is retained so that enqueueing its tick again is refused.
func TestCronAsynqBridgeEnqueuesEachTickOnce(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	broker := redistest.StartNode(t)
	opt := asynq.RedisClientOpt{Addr: broker.Addr()}
	newEnqueuer := func() *countingEnqueuer {
		ac := asynq.NewClient(opt)
		t.Cleanup(func() { _ = ac.Close() })
		return &countingEnqueuer{c: ac}
	}
	task := asynq.NewTask("cron:tick", nil, asynq.MaxRetry(0))

	var mu sync.Mutex
	processed := map[string]int{}
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 4, Logger: cronQuietAsynq{}, LogLevel: asynq.FatalLevel, ShutdownTimeout: 2 * time.Second})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		mu.Lock()
		processed[t.ResultWriter().TaskID()]++
		mu.Unlock()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	events := newCronLedger()
	skew := scheduler.WithSkew(500 * time.Millisecond)
	var enqs []*countingEnqueuer
	var scheds []*scheduler.Scheduler
	for range 2 {
		enq := newEnqueuer()
		s := cronScheduler(t, c, skew, scheduler.WithObserver(events.observe))
		if err := s.RegisterTask("bridge", cronSpec, enq, task); err != nil {
			t.Fatal(err)
		}
		enqs, scheds = append(enqs, enq), append(scheds, s)
	}
	lateEnq := newEnqueuer()
	enqs = append(enqs, lateEnq)
	late := cronSingleton(t, c, "bridge", scheduler.EnqueueJob(lateEnq, task), 300*time.Millisecond, skew, scheduler.WithObserver(events.observe))

	start := time.Now()
	for _, s := range scheds {
		s.Start()
	}
	late.Start()
	time.Sleep(cronRun)
	end := time.Now()
	for _, s := range scheds {
		if err := s.Stop(within(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	<-late.Stop().Done()

	var ok int64
	for _, e := range enqs {
		ok += e.ok.Load()
	}
	// Wait (bounded) for the server to process everything enqueued.
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		n := 0
		for _, k := range processed {
			n += k
		}
		mu.Unlock()
		if int64(n) >= ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d tasks processed", n, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	perTick := map[int64]int{}
	for id, n := range processed {
		for tick := start.Truncate(time.Second); tick.Before(end.Add(time.Second)); tick = tick.Add(time.Second) {
			if id == "cron:bridge:"+strconv.FormatInt(tick.UnixMilli(), 10) { // the documented task ID
				perTick[tick.UnixMilli()] = n
			}
		}
	}
	if len(perTick) != len(processed) {
		t.Errorf("processed tasks with unexpected IDs: %v", processed)
	}
	mu.Unlock()
	checked := checkOnce(t, "bridge", perTick, start, end.Add(-time.Second))
	if checked < 10 {
		t.Fatalf("only %d ticks checked", checked)
	}
	if int64(len(perTick)) != ok {
		t.Errorf("%d successful enqueues for %d distinct tasks", ok, len(perTick))
	}
	if n := events.count(scheduler.OutcomeRan); int64(n) != ok { // the bridge's enqueues
		t.Errorf("%d enqueued events, %d successful enqueues", n, ok)
	}

	// Completed tasks are retained: enqueueing a done tick again is refused.
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	done, err := insp.ListCompletedTasks("default", asynq.PageSize(100))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(done)) != ok {
		t.Errorf("%d completed tasks retained, want %d", len(done), ok)
	}
	if len(done) > 0 {
		_, err := enqs[0].c.Enqueue(task, asynq.TaskID(done[0].ID))
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Errorf("re-enqueueing completed task %s: %v, want ErrTaskIDConflict", done[0].ID, err)
		}
	}
	calls := make([]int64, len(enqs))
	for i, e := range enqs {
		calls[i] = e.calls.Load()
	}
	t.Logf("%d ticks enqueued once each; enqueue calls per replica %v (the late replica skips at the tick lock)", checked, calls)
}
