package scheduler

import (
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// Defaults used when no option overrides them.
const (
	// DefaultSkew bounds, for each replica, its clock's offset from the
	// lock nodes' clocks plus the delay with which its cron delivers a
	// tick: the runs of one tick on two replicas start within twice the
	// skew of each other.
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
	catchUp   time.Duration // 0: off
	now       func() time.Time
	replica   string
	clockObs  func([]ClockReport)
}

func defaultConfig() config {
	return config{
		skew:    DefaultSkew,
		ttl:     DefaultTTL,
		overlap: SkipIfRunning,
		loc:     time.UTC,
		logger:  slog.Default(),
		now:     time.Now,
		replica: defaultReplica(),
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
	case c.catchUp < 0:
		return invalidf("catch-up deadline must not be negative, got %v", c.catchUp)
	case c.now == nil:
		return invalidf("nil clock")
	case c.replica == "":
		return invalidf("empty replica name")
	}
	return nil
}

// Option configures a Singleton wrapper, a Scheduler (defaults for all its
// jobs) or one job registered with a Scheduler (overriding those defaults).
type Option func(*config)

// WithSkew bounds, for each replica, the offset of its clock from the lock
// nodes' clocks (ahead or behind) plus the delay with which its cron
// delivers a tick (default DefaultSkew, 1s). Each tick runs at most once
// across replicas within that bound; a run that starts later than the skew
// after its activation is skipped (OutcomeSkippedNoTick). Replicas measure
// their offset and warn above half the skew. A won tick is remembered for
// 2·skew + 2·max(skew, 250ms) at least, and for most of the schedule's
// interval when it is known.
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
// are interpreted (default time.UTC, so that replicas in different zones
// agree; asynq's own scheduler does the same). With Singleton and WithSpec
// it must be the location of the cron.Cron that runs the job
// (cron.WithLocation). In a zone with daylight saving time a daily job is
// skipped on the day the clock springs over its time and runs twice when
// it falls back over it, as robfig/cron does; choose UTC to avoid both.
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

// WithSchedule gives Singleton the schedule on which the cron runs the job
// (optional: without it a run's tick is the whole second at which cron
// activated it). With it, a run's tick is the latest activation at or
// before its start, which also tolerates deliveries more than a second
// late, and tick records are kept for most of the interval. Use the value
// the cron was given (cron.Cron.Schedule). cron.ConstantDelaySchedule
// (robfig's "@every") is refused: its ticks count from each cron's start,
// so replicas do not share them; schedule the job with Every instead. A
// Scheduler supplies the schedule itself.
func WithSchedule(s cron.Schedule) Option {
	return func(c *config) { c.schedule, c.spec, c.hasSpec = s, "", false }
}

// WithSpec gives Singleton the cron spec with which the job was added to
// the cron (cron.Cron.AddJob), parsed as Parse does, with the effect of
// WithSchedule. "@every" specs are refused with ErrInvalidSpec, for the
// reason WithSchedule gives. A Scheduler supplies the spec itself.
func WithSpec(spec string) Option {
	return func(c *config) { c.spec, c.hasSpec, c.schedule = spec, true, nil }
}

// WithCatchUp turns catch-up on with the given deadline (default 0: off).
// When a Scheduler starts (or registers a job after it started), the latest
// activation of the job within the deadline before now runs once, on one
// replica, unless some replica already ran it: after an outage in which no
// replica ran a tick, the first replica back runs it. Older missed ticks
// are not run. Tick records are then kept for the deadline plus the tick
// window, one lock key per tick, so a per-second job with a one-hour
// deadline keeps 3600 keys; give every replica the same deadline. A
// Singleton cannot catch up (it does not know when its cron starts):
// NewSingleton refuses the option.
func WithCatchUp(deadline time.Duration) Option { return func(c *config) { c.catchUp = deadline } }

// WithClock sets the clock from which a run's tick is told (default
// time.Now): the clock of the cron.Cron that runs the job, for a cron that
// runs on a clock other than the process's. Durations are always measured
// on the process's monotonic clock.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithReplica names this replica in events, logs and Entries (default
// "<hostname>:<pid>").
func WithReplica(name string) Option { return func(c *config) { c.replica = name } }

// WithClockObserver installs a hook called with each measurement of this
// replica's clock offset to the lock nodes (see the package documentation),
// e.g. to feed a metric. It is called on a background goroutine.
func WithClockObserver(f func([]ClockReport)) Option {
	return func(c *config) { c.clockObs = f }
}

// defaultReplica is "<hostname>:<pid>".
func defaultReplica() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}
