package scheduler

import (
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
)

// Defaults used when no option overrides them.
const (
	// DefaultSkew is how far apart the runs of one tick on different
	// replicas may start (clock offsets and delivery delays together).
	DefaultSkew = time.Second
	// DefaultTTL is the TTL of the "running" lock: how soon after a replica
	// dies in the middle of a job the next tick can run elsewhere.
	DefaultTTL = 5 * time.Second
	// DefaultRetention is the shortest retention of a task enqueued by the
	// asynq bridge; it is raised to cover the tick window when that is
	// longer.
	DefaultRetention = time.Minute
)

// Overlap says what a tick does when the previous run of its job is still
// running, on this replica or another.
type Overlap int

const (
	// SkipIfRunning skips the tick (the default). The skip is reported with
	// OutcomeSkippedOverlap and the tick is not run anywhere.
	SkipIfRunning Overlap = iota
	// DelayIfRunning waits for the previous run to end, at most the max
	// delay (see WithMaxDelay), then runs the tick; it still counts as that
	// tick and runs once across replicas. A tick that waited in vain is
	// reported with OutcomeSkippedOverlap.
	DelayIfRunning
)

// String returns the policy's name.
func (o Overlap) String() string {
	switch o {
	case SkipIfRunning:
		return "skip"
	case DelayIfRunning:
		return "delay"
	}
	return "unknown"
}

type config struct {
	skew      time.Duration
	ttl       time.Duration
	overlap   Overlap
	maxDelay  time.Duration // 0: the schedule's interval
	retention time.Duration // 0: DefaultRetention
	loc       *time.Location
	logger    *slog.Logger
	observer  func(Event)
	schedule  cron.Schedule
	spec      string
	hasSpec   bool
}

func defaultConfig() config {
	return config{
		skew:    DefaultSkew,
		ttl:     DefaultTTL,
		overlap: SkipIfRunning,
		loc:     time.Local,
		logger:  slog.Default(),
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return invalidf("nil option")
		}
		o(c)
	}
	return c.validate()
}

func (c *config) validate() error {
	switch {
	case c.skew <= 0:
		return invalidf("skew must be positive, got %v", c.skew)
	case c.ttl <= 0:
		return invalidf("ttl must be positive, got %v", c.ttl)
	case c.overlap != SkipIfRunning && c.overlap != DelayIfRunning:
		return invalidf("unknown overlap policy %d", int(c.overlap))
	case c.maxDelay < 0:
		return invalidf("max delay must not be negative, got %v", c.maxDelay)
	case c.retention < 0:
		return invalidf("retention must not be negative, got %v", c.retention)
	case c.loc == nil:
		return invalidf("nil location")
	case c.logger == nil:
		return invalidf("nil logger")
	}
	return nil
}

// Option configures a Singleton wrapper, a Scheduler (defaults for all its
// jobs) or one job registered with a Scheduler (overriding those defaults).
type Option func(*config)

// WithSkew sets the largest difference between the moments different
// replicas start the run of one tick, clock offsets and delivery delays
// together (default 1s). A run is attributed to the activation of the
// schedule within the skew of its start; the skew must be smaller than the
// smallest interval of the schedule. Ticks are remembered for skew + max(skew,
// 250ms) after they were won.
func WithSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithTTL sets the TTL of the job's "running" lock (default 5s). It is kept
// alive while the job runs; if the replica dies, the lock expires within
// the TTL and later ticks run on other replicas. It must exceed the lock
// client's node timeout plus its drift allowance.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithOverlap sets what a tick does while the previous run of the job is
// still running (default SkipIfRunning).
func WithOverlap(o Overlap) Option { return func(c *config) { c.overlap = o } }

// WithMaxDelay bounds how long a tick waits for the previous run under
// DelayIfRunning, counted from the tick's start (default: the smallest
// interval of the schedule). Zero restores the default.
func WithMaxDelay(d time.Duration) Option { return func(c *config) { c.maxDelay = d } }

// WithRetention sets how long asynq keeps a task enqueued by the bridge after
// it completed (default DefaultRetention). While it is kept, a replica that
// tries to enqueue the same tick gets asynq.ErrTaskIDConflict. It must not
// be shorter than the tick window (skew + max(skew, 250ms)).
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithLocation sets the time zone in which specs without a CRON_TZ= prefix
// are interpreted (default time.Local). With Singleton it must be the
// location of the cron.Cron that runs the job (cron.WithLocation).
func WithLocation(loc *time.Location) Option { return func(c *config) { c.loc = loc } }

// WithLogger sets the structured logger of results and skips (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook called once for each run with its outcome
// (and once more when a delayed run starts), e.g. to feed metrics. It is
// called synchronously on the run's goroutine: it must be fast and must not
// block. Lock-level events (acquisitions, extensions, losses) come from the
// redlock client's own observer.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// WithSchedule gives Singleton the schedule on which the cron runs the job,
// to tell which tick each run belongs to. Use the same value the cron was
// given (cron.Cron.Schedule), or WithSpec with the same spec. A Scheduler
// supplies it itself.
func WithSchedule(s cron.Schedule) Option {
	return func(c *config) { c.schedule, c.spec, c.hasSpec = s, "", false }
}

// WithSpec gives Singleton the cron spec with which the job was added to
// the cron (cron.Cron.AddJob), parsed as Parse does. A Scheduler supplies
// it itself.
func WithSpec(spec string) Option {
	return func(c *config) { c.spec, c.hasSpec, c.schedule = spec, true, nil }
}
