package integration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/robfig/cron/v3"
)

// The robfig idiom tests: 3 replicas, each its own cron.Cron and its own
// lock client, over the same 5 redis-server nodes; per-second ticks for
// idiomRun. Each tick must run at most once (strictly); at least
// idiomMinRuns of the idiomTicks ticks must run (a loaded machine may make
// a replica skip one).
const (
	idiomRun     = 8*time.Second + 500*time.Millisecond
	idiomTicks   = 8
	idiomMinRuns = 6
)

// cronReplica is one replica: its clock's offset from the lock nodes'
// (ahead if positive) and how late its cron delivers ticks. Offsets are
// simulated: the replica's cron fires on its own whole seconds (a shifted
// schedule) and its Singleton reads its own clock (WithClock).
type cronReplica struct {
	offset, delay time.Duration
}

func (r cronReplica) clock() func() time.Time {
	return func() time.Time { return time.Now().Add(r.offset) }
}

// shiftedSchedule activates by later than s (earlier if negative).
type shiftedSchedule struct {
	s  cron.Schedule
	by time.Duration
}

func (s shiftedSchedule) Next(t time.Time) time.Time { return s.s.Next(t.Add(-s.by)).Add(s.by) }

// cron returns the replica's cron running job every second of its clock,
// through the chain. An on-time replica is exactly the robfig idiom:
// cron.New(cron.WithSeconds()) and AddJob("* * * * * *", chain.Then(job)).
func (r cronReplica) cron(t *testing.T, job cron.Job, chain ...cron.JobWrapper) *cron.Cron {
	t.Helper()
	c := cron.New(cron.WithSeconds())
	if r.offset == 0 && r.delay == 0 {
		if _, err := c.AddJob("* * * * * *", cron.NewChain(chain...).Then(job)); err != nil {
			t.Fatal(err)
		}
	} else {
		c.Schedule(shiftedSchedule{scheduler.Every(time.Second), r.delay - r.offset}, cron.NewChain(chain...).Then(job))
	}
	t.Cleanup(func() { <-c.Stop().Done() })
	return c
}

// naiveTicks is the control: the usual cron lock (lock the tick on the
// replica's clock, run, release at once) on the same replicas.
type naiveTicks struct {
	mu   sync.Mutex
	runs map[int64]int
}

func (n *naiveTicks) job(t *testing.T, c *redistest.Cluster, now func() time.Time) cron.Job {
	locks := cronLockClient(t, c)
	return cron.FuncJob(func() {
		tick := now().Truncate(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := locks.TryAcquire(ctx, "naive:"+tick.String(), 5*time.Second)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.runs[tick.UnixMilli()]++
		n.mu.Unlock()
		_ = l.Release(ctx) // the job took 0ms: release at once
	})
}

func (n *naiveTicks) twice() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, runs := range n.runs {
		if runs > 1 {
			k++
		}
	}
	return k
}

// atMostOnce asserts that no tick ran twice and that at least min ran; it
// returns the number of ticks run.
func atMostOnce(t *testing.T, what string, runs map[int64]int, min int) int {
	t.Helper()
	for tick, n := range runs {
		if n > 1 {
			t.Errorf("%s: tick %s ran %d times", what, time.UnixMilli(tick).UTC().Format(time.TimeOnly), n)
		}
	}
	if len(runs) < min {
		t.Errorf("%s: %d ticks ran, want at least %d", what, len(runs), min)
	}
	return len(runs)
}

// runIdiom starts 3 replicas of a 0ms job written as the robfig idiom,
// Singleton with no spec and the default skew, each also running the naive
// control, for idiomRun; it returns the ledger, the control and what each
// replica measured of its clock offset.
func runIdiom(t *testing.T, layout []cronReplica) (*cronLedger, *naiveTicks, [][]scheduler.Event) {
	c := redistest.StartCluster(t, 5)
	l := newCronLedger()
	naive := &naiveTicks{runs: map[int64]int{}}
	var mu sync.Mutex
	measured := make([][]scheduler.Event, len(layout)) // the last clock measurement of each node
	var crons []*cron.Cron
	for i, r := range layout {
		w := scheduler.Singleton(cronLockClient(t, c), "report", cronQuiet, cronsim.WithClock[scheduler.Option](r.clock()),
			scheduler.WithObserver(func(e scheduler.Event) {
				l.observe(e)
				if e.Outcome != scheduler.OutcomeClock {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				k := slices.IndexFunc(measured[i], func(m scheduler.Event) bool { return m.Node == e.Node })
				if k < 0 {
					measured[i] = append(measured[i], e)
				} else {
					measured[i][k] = e
				}
			}))
		var chain []cron.JobWrapper
		if r.delay > 0 {
			chain = append(chain, delayed(r.delay)) // the cron's delivery, before Singleton sees the run
		}
		crons = append(crons, r.cron(t, scheduler.Func(l.job(i, 0)), append(chain, w)...))
		crons = append(crons, cronReplica{offset: r.offset}.cron(t, naive.job(t, c, r.clock()), chain...))
	}
	for _, cr := range crons {
		cr.Start()
	}
	time.Sleep(idiomRun)
	for _, cr := range crons {
		<-cr.Stop().Done()
	}
	mu.Lock()
	defer mu.Unlock()
	return l, naive, measured
}

// TestCronRobfigIdiomEachTickOnce: cron.NewChain(scheduler.Singleton(locks,
// "report")).Then(job) on cron.New(cron.WithSeconds()) with "* * * * * *",
// default skew, 3 replicas, one of them delivering its ticks 300ms late:
// each tick at most once, nearly all run. The naive lock runs the late
// replica's ticks again: the check can fail.
func TestCronRobfigIdiomEachTickOnce(t *testing.T) {
	t.Parallel()
	l, naive, _ := runIdiom(t, []cronReplica{{}, {}, {delay: 300 * time.Millisecond}})
	ran := atMostOnce(t, "singleton", l.perTick(), idiomMinRuns)
	if n := naive.twice(); n < idiomMinRuns/2 {
		t.Errorf("naive lock: %d ticks ran twice; the late replica should rerun most", n)
	}
	t.Logf("%d ticks ran once each; the naive lock ran %d ticks twice; outcomes: %d ran, %d skipped_other_replica",
		ran, naive.twice(), l.count(scheduler.OutcomeRan), l.count(scheduler.OutcomeSkippedOtherReplica))
}

// TestCronClockOffsetsWithinSkew: replicas whose clocks are 0.9×skew ahead
// and 0.9×skew behind the lock nodes (and one exact), default skew 1s,
// run each tick at most once; each replica measures its offset to every
// node. The naive lock runs ticks twice in the same setting.
func TestCronClockOffsetsWithinSkew(t *testing.T) {
	t.Parallel()
	off := time.Second * 9 / 10 // the default skew is 1s
	layout := []cronReplica{{offset: off}, {}, {offset: -off}}
	l, naive, measured := runIdiom(t, layout)
	ran := atMostOnce(t, "singleton", l.perTick(), idiomMinRuns)
	if n := naive.twice(); n < idiomMinRuns/2 {
		t.Errorf("naive lock: %d ticks ran twice; the replica behind should rerun most", n)
	}
	for i, reps := range measured {
		// Offset is the node's clock minus the replica's. A node may fail
		// to answer on a loaded machine; a quorum must have measured.
		good := 0
		for _, r := range reps {
			switch {
			case r.Err != nil:
				t.Logf("replica %d: node %s not measured: %v", i, r.Node, r.Err)
			case (r.Offset + layout[i].offset).Abs() > 250*time.Millisecond+r.Duration:
				t.Errorf("replica %d (offset %v): node %s measured %v (rtt %v)", i, layout[i].offset, r.Node, r.Offset, r.Duration)
			default:
				good++
			}
		}
		if good < 3 {
			t.Errorf("replica %d measured its offset to %d of 5 nodes, want at least 3", i, good)
		}
	}
	offsets := make([]time.Duration, len(measured))
	for i, reps := range measured {
		if len(reps) > 0 {
			offsets[i] = reps[0].Offset
		}
	}
	t.Logf("%d ticks ran once each; the naive lock ran %d ticks twice; measured offsets %v", ran, naive.twice(), offsets)
}

// TestCronSharedWrapperKeepsJobsApart: one Singleton in cron.WithChain over
// two jobs (every second, every other second), 3 replicas: each job runs
// each of its ticks at most once and none is dropped. The control gives the
// two jobs one name (two Singletons named alike): the every-other-second
// job loses ticks to the other.
func TestCronSharedWrapperKeepsJobsApart(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	fast, slow, cfast, cslow := newCronLedger(), newCronLedger(), newCronLedger(), newCronLedger()
	var crons []*cron.Cron
	add := func(cr *cron.Cron, spec string, job cron.Job) {
		if _, err := cr.AddJob(spec, job); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		cr := cron.New(cron.WithSeconds(), cron.WithChain(scheduler.Singleton(cronLockClient(t, c), "svc", cronQuiet)))
		add(cr, "* * * * * *", scheduler.Func(fast.job(i, 0)))
		add(cr, "*/2 * * * * *", scheduler.Func(slow.job(i, 0)))
		ctl := cron.New(cron.WithSeconds())
		locks := cronLockClient(t, c)
		add(ctl, "* * * * * *", cron.NewChain(scheduler.Singleton(locks, "same", cronQuiet)).Then(scheduler.Func(cfast.job(i, 0))))
		add(ctl, "*/2 * * * * *", cron.NewChain(scheduler.Singleton(locks, "same", cronQuiet)).Then(scheduler.Func(cslow.job(i, 0))))
		crons = append(crons, cr, ctl)
	}
	for _, cr := range crons {
		cr.Start()
		t.Cleanup(func() { <-cr.Stop().Done() })
	}
	time.Sleep(idiomRun)
	for _, cr := range crons {
		<-cr.Stop().Done()
	}
	atMostOnce(t, "every second", fast.perTick(), idiomMinRuns)
	atMostOnce(t, "every other second", slow.perTick(), idiomMinRuns/2)
	// Control: on even seconds both jobs want the one tick lock, so one
	// of them loses each even tick.
	cf, cs := cfast.perTick(), cslow.perTick()
	lost := 0
	for tick := range cs {
		if cf[tick] > 0 {
			t.Errorf("control: both jobs ran tick %s under one name", time.UnixMilli(tick).UTC().Format(time.TimeOnly))
		}
	}
	for tick := range cf {
		if time.UnixMilli(tick).Second()%2 == 0 {
			lost++ // the every-other-second job lost this tick
		}
	}
	lost += len(cs) // the every-second job lost these
	if lost < 2 {
		t.Errorf("control: only %d ticks lost by one of two jobs sharing a name", lost)
	}
	dropped := lost
	t.Logf("shared wrapper: %d and %d ticks ran; control: one of the two jobs lost each of %d even ticks",
		len(fast.perTick()), len(slow.perTick()), dropped)
}

// TestCronCatchUpAfterFullOutage: 3 Scheduler replicas run a job every 5s;
// all are stopped across a tick and come back 1s after it, a few hundred
// milliseconds apart. With WithCatchUp the missed tick runs once, on one
// replica; the control job, without catch-up, loses it.
func TestCronCatchUpAfterFullOutage(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 5)
	caught, plain := newCronLedger(), newCronLedger()
	start := func(i int) *scheduler.Scheduler {
		s := cronScheduler(t, c)
		if err := s.Register("caught", "*/5 * * * * *", caught.job(i, 0), scheduler.WithCatchUp(10*time.Second),
			scheduler.WithObserver(caught.observe)); err != nil {
			t.Fatal(err)
		}
		if err := s.Register("plain", "*/5 * * * * *", plain.job(i, 0)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		return s
	}
	stopAll := func(ss []*scheduler.Scheduler) {
		for _, s := range ss {
			if err := s.Stop(within(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// T is a tick at least 1.5s away; the replicas start 1s after T-5.
	base := time.Now().Truncate(5 * time.Second).Add(5 * time.Second)
	if time.Until(base) < 1500*time.Millisecond {
		base = base.Add(5 * time.Second)
	}
	at := func(d time.Duration) { time.Sleep(time.Until(base.Add(d))) }
	var reps []*scheduler.Scheduler
	for i := range 3 {
		reps = append(reps, start(i))
	}
	at(time.Second) // tick T ran
	stopAll(reps)
	at(6 * time.Second) // T+5 missed by all
	reps = nil
	for i := range 3 {
		reps = append(reps, start(3+i))
		time.Sleep(300 * time.Millisecond)
	}
	at(11 * time.Second) // T+10 ran normally
	stopAll(reps)
	checkCatchUpRuns(t, caught, plain, base)
}

// checkCatchUpRuns checks TestCronCatchUpAfterFullOutage's runs; base is
// the tick T.
func checkCatchUpRuns(t *testing.T, caught, plain *cronLedger, base time.Time) {
	missed := base.Add(5 * time.Second).UnixMilli()
	atMostOnce(t, "caught", caught.perTick(), 3)
	if n := caught.perTick()[missed]; n != 1 {
		t.Errorf("the missed tick ran %d times with catch-up, want 1", n)
	}
	if n := caught.count(scheduler.OutcomeLate); n < 1 {
		t.Errorf("%d late (caught-up) events", n)
	}
	atMostOnce(t, "plain", plain.perTick(), 1)
	if n := plain.perTick()[missed]; n != 0 {
		t.Errorf("control: the missed tick ran %d times without catch-up", n)
	}
	var by []int
	for _, s := range caught.spans() {
		if s.tick.UnixMilli() == missed {
			by = append(by, s.replica)
		}
	}
	t.Logf("the missed tick ran on replica %v (3, 4, 5 came back in that order); late (caught-up) events %d",
		by, caught.count(scheduler.OutcomeLate))
}
