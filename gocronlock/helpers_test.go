package gocronlock

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nodeTimeout is the lock clients' node timeout: patient, for a machine
// whose CPUs the tests share with other work (the default is 50ms).
const nodeTimeout = 300 * time.Millisecond

// newLocks returns a redlock client of its own (its own connections, so
// that closing it is one replica's death) on the cluster's nodes.
func newLocks(t *testing.T, c *redistest.Cluster) *redlock.Client {
	t.Helper()
	cl, err := redlock.NewFromURLs(c.URLs(), redlock.WithNodeTimeout(nodeTimeout), redlock.WithLogger(quiet))
	if err != nil {
		t.Fatalf("redlock client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// newScheduler returns a gocron scheduler shut down at the test's end.
func newScheduler(t *testing.T, opts ...gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatalf("gocron scheduler: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// recorder collects the runs of one job on every replica and the events of
// every replica's locker.
type recorder struct {
	mu        sync.Mutex
	runs      []jobRun
	events    []scheduler.Event
	active    int
	maxActive int             // the most runs under way at once, across replicas
	refusals  []time.Duration // how long each failed Lock took (timedLocker)
	// lateLocks counts the Locks that came late, won (true) and refused
	// (timedLocker).
	lateLocks [2]int
}

// refusalSpread returns the shortest, median and longest failed Lock.
func (r *recorder) refusalSpread() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refusals) == 0 {
		return nil
	}
	d := slices.Sorted(slices.Values(r.refusals))
	return []time.Duration{d[0].Round(time.Millisecond), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond)}
}

type jobRun struct {
	replica int
	start   time.Time
}

// task returns the job of replica i: it records its run and lasts d.
func (r *recorder) task(i int, d time.Duration) func() {
	return func() {
		r.mu.Lock()
		r.runs = append(r.runs, jobRun{replica: i, start: time.Now()})
		r.active++
		r.maxActive = max(r.maxActive, r.active)
		r.mu.Unlock()
		time.Sleep(d)
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
	}
}

func (r *recorder) observe(ev scheduler.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// ticks returns the ticks this locker reported as won, sorted, and the
// outcomes counted.
func (r *recorder) ticks() ([]time.Time, map[scheduler.Outcome]int, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ticks []time.Time
	var errs []error
	counts := map[scheduler.Outcome]int{}
	for _, ev := range r.events {
		counts[ev.Outcome]++
		if ev.Outcome == scheduler.OutcomeLockError || ev.Outcome == scheduler.OutcomeFailed {
			errs = append(errs, ev.Err)
		}
		// A run is reported when it ends: ran, or failed by a lost lock.
		if ev.Outcome == scheduler.OutcomeRan || ev.Outcome == scheduler.OutcomeFailed && !ev.Tick.IsZero() {
			ticks = append(ticks, ev.Tick)
		}
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	return ticks, counts, errs
}

// lockErrorTicks returns the ticks (Unix ns) of which a replica reported
// a lock error.
func (r *recorder) lockErrorTicks() map[int64]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]bool{}
	for _, ev := range r.events {
		if ev.Outcome == scheduler.OutcomeLockError {
			out[ev.Tick.UnixNano()] = true
		}
	}
	return out
}

func (r *recorder) runCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// checkOncePerTick fails unless every tick won ran once, the ticks follow
// each other every step with none missing (but for ticks whose lock nodes
// did not answer in time, reported as lock_error: on a loaded machine they
// may miss a tick, as they should), there are at least want of them, and
// there were as many runs as ticks.
func checkOncePerTick(t *testing.T, r *recorder, step time.Duration, want int) {
	t.Helper()
	ticks, counts, errs := r.ticks()
	t.Logf("ticks won %d, runs %d, outcomes %v, errors %v", len(ticks), r.runCount(), counts, errs)
	failed := r.lockErrorTicks()
	for i := 1; i < len(ticks); i++ {
		if ticks[i].Equal(ticks[i-1]) {
			t.Errorf("tick %s won twice", ticks[i].Format(time.RFC3339Nano))
		}
		for m := ticks[i-1].Add(step); m.Before(ticks[i]); m = m.Add(step) {
			if !failed[m.UnixNano()] {
				t.Errorf("tick %s ran nowhere, with no lock error", m.Format(time.RFC3339Nano))
			}
		}
	}
	if len(ticks) < want {
		t.Errorf("%d ticks ran, want at least %d", len(ticks), want)
	}
	if n := r.runCount(); n != len(ticks) {
		t.Errorf("%d runs for %d ticks won", n, len(ticks))
	}
}

// checkRunsInTheirTicks fails unless each run started at or after a tick
// won, within two steps of it (Lock, which tells the tick from its own
// start, may take a while on slow nodes before the run starts), one run
// per tick: a run counts for the interval in which gocron locked it,
// whatever delayed that (a Wait queue, the previous run's lock).
func checkRunsInTheirTicks(t *testing.T, r *recorder, step time.Duration) {
	t.Helper()
	ticks, _, _ := r.ticks()
	won := map[int64]int{}
	for _, tk := range ticks {
		won[tk.UnixNano()]++
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := slices.Clone(r.runs)
	slices.SortFunc(runs, func(a, b jobRun) int { return a.start.Compare(b.start) })
	for _, x := range runs {
		k := x.start.Truncate(step)
		switch {
		case won[k.Add(-step).UnixNano()] > 0: // the earlier tick first
			won[k.Add(-step).UnixNano()]--
		case won[k.UnixNano()] > 0:
			won[k.UnixNano()]--
		default:
			t.Errorf("replica %d ran at %s, not within two steps of a tick won", x.replica, x.start.Format(time.RFC3339Nano))
		}
	}
}

// runsPerWindow counts the runs by the step-long window (since the Unix
// epoch) in which they started: the windows from the first run's to the
// last run's, and the runs.
func runsPerWindow(r *recorder, step time.Duration) (windows, runs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs) == 0 {
		return 0, 0
	}
	lo, hi := r.runs[0].start.UnixNano()/int64(step), r.runs[0].start.UnixNano()/int64(step)
	for _, x := range r.runs {
		w := x.start.UnixNano() / int64(step)
		lo, hi = min(lo, w), max(hi, w)
	}
	return int(hi-lo) + 1, len(r.runs)
}

// sleepUntilPhase sleeps until phase past the next whole second (at least
// 50ms away), so that schedulers start at known offsets in the second.
func sleepUntilPhase(phase time.Duration) time.Time {
	now := time.Now()
	at := now.Truncate(time.Second).Add(phase)
	for at.Sub(now) < 50*time.Millisecond {
		at = at.Add(time.Second)
	}
	time.Sleep(time.Until(at))
	return at
}

// naiveLocker is the direct adapter of redlock to gocron that the package
// replaces: a lock under key(name) held while the job runs, released by
// Unlock (or left to its TTL with no keep-alive). It is the control that
// shows the tests' checks can fail.
type naiveLocker struct {
	locks *redlock.Client
	key   func(name string) string
	ttl   time.Duration
}

func (n naiveLocker) Lock(ctx context.Context, name string) (gocron.Lock, error) {
	lk, err := n.locks.TryAcquire(ctx, n.key(name), n.ttl)
	if err != nil {
		return nil, err
	}
	return naiveLock{lk}, nil
}

type naiveLock struct{ lk *redlock.Lock }

func (n naiveLock) Unlock(ctx context.Context) error { return n.lk.Release(ctx) }

// offsetClock is a real clock that reads offset ahead (behind if
// negative): a gocron scheduler on it fires a job when its clock reads the
// activation, offset early in real time, as on a replica whose clock is
// off. Timers run in real time.
type offsetClock struct {
	clockwork.Clock
	offset time.Duration
}

func newOffsetClock(offset time.Duration) offsetClock {
	return offsetClock{Clock: clockwork.NewRealClock(), offset: offset}
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
