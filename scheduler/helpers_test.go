package scheduler

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

var quiet = WithLogger(slog.New(slog.DiscardHandler))

// shifted is a schedule whose activations come by later (earlier if
// negative) than those of s: the cron of a replica whose deliveries are
// late, or whose clock runs ahead.
type shifted struct {
	s  cron.Schedule
	by time.Duration
}

func (s shifted) Next(t time.Time) time.Time { return s.s.Next(t.Add(-s.by)).Add(s.by) }

// span is one run of a job.
type span struct {
	replica    int
	tick       time.Time
	start, end time.Time
	cause      error
}

// recorder records the runs of a job on every replica, and overlaps.
type recorder struct {
	mu       sync.Mutex
	spans    []span
	events   []Event
	inside   atomic.Int32
	overlaps atomic.Int32
}

func (r *recorder) observe(e Event) {
	if e.Outcome == OutcomeClock {
		return // a clock measurement, not a run (see clock_test.go)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// job returns replica's job: it runs for work (or until its context ends).
func (r *recorder) job(replica int, work time.Duration) funcJob {
	return func(ctx context.Context) error {
		info, _ := FromContext(ctx)
		if r.inside.Add(1) > 1 {
			r.overlaps.Add(1)
		}
		start := time.Now()
		if work > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(work):
			}
		}
		end := time.Now()
		r.inside.Add(-1)
		cause := context.Cause(ctx)
		r.mu.Lock()
		r.spans = append(r.spans, span{replica: replica, tick: info.Tick, start: start, end: end, cause: cause})
		r.mu.Unlock()
		return cause
	}
}

// perTick counts the runs of each tick.
func (r *recorder) perTick() map[time.Time]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[time.Time]int{}
	for _, s := range r.spans {
		m[s.tick.UTC()]++
	}
	return m
}

func (r *recorder) runs() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.spans)
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

func (r *recorder) count(o Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

func (r *recorder) eventsOf(o Outcome) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.Outcome == o {
			out = append(out, e)
		}
	}
	return out
}

// startReplica runs job on its own cron under a Singleton wrapper taking
// locks from locks; the cron fires shift after (before if negative) each
// activation of sched.
func startReplica(t *testing.T, locks locker, name string, sched cron.Schedule, job cron.Job, shift time.Duration, opts ...Option) *cron.Cron {
	t.Helper()
	w, err := newSingleton(locks, name, append([]Option{withSchedule(sched), quiet}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	c := cron.New()
	c.Schedule(shifted{sched, shift}, w(job))
	c.Start()
	return c
}

// stopCrons stops crons and waits for their running jobs.
func stopCrons(crons ...*cron.Cron) {
	var done []context.Context
	for _, c := range crons {
		done = append(done, c.Stop())
	}
	for _, d := range done {
		<-d.Done()
	}
}

// ticks returns the n activations of every second after t0.
func ticks(t0 time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = t0.Add(time.Duration(i+1) * time.Second).UTC()
	}
	return out
}

// withSchedule gives a Singleton the schedule its cron runs the job on, as
// WithSpec does with a parsed spec (tests use schedules no spec writes).
func withSchedule(s cron.Schedule) Option {
	return func(c *config) { c.schedule, c.spec, c.hasSpec = s, "", false }
}

// defaultSkew is WithSkew's default.
const defaultSkew = time.Second

// tickResource, runningResource and taskID are the keys of job name of a
// Singleton or Scheduler (the bridge's task ID is its tick's key).
func tickResource(name string, tick time.Time) string { return keysOf(name).tickResource(tick) }

func runningResource(name string) string { return keysOf(name).runningResource() }

func taskID(name string, tick time.Time) string { return tickResource(name, tick) }

func keysOf(name string) *runner {
	r, err := newRunner(nil, name, nil, noJob, defaultConfig(), background)
	if err != nil {
		panic(err)
	}
	return r
}

// secondTick is the tick of a spec-less run at now.
func secondTick(now time.Time) time.Time { return now.Truncate(time.Second) }
