package scheduler

import (
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/robfig/cron/v3"
)

// Defaults used when no option overrides them.
const (
	defaultSkew      = time.Second
	defaultTTL       = 5 * time.Second
	defaultRetention = time.Minute // the bridge's least asynq retention
)

func init() {
	cronsim.Clock = func(now func() time.Time) any { return withClock(now) }
	cronsim.Replica = func(name string) any { return withReplica(name) }
}

type config struct {
	skew     time.Duration
	ttl      time.Duration
	delay    bool          // WithDelayIfRunning
	maxDelay time.Duration // 0: the schedule's interval
	loc      *time.Location
	logger   *slog.Logger
	observer func(Event)
	schedule cron.Schedule
	spec     string
	hasSpec  bool
	catchUp  time.Duration // 0: off
	now      func() time.Time
	replica  string
	anyName  bool // NewJobs: job names another cron library gives
	// tracerProvider is nil for the global provider.
	tracerProvider trace.TracerProvider
}

func defaultConfig() config {
	return config{
		skew:    defaultSkew,
		ttl:     defaultTTL,
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
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c.validate()
}

func (c *config) validate() error {
	switch {
	case c.skew <= 0:
		return invalidf("skew must be positive, got %v", c.skew)
	case c.ttl <= 0:
		return invalidf("ttl must be positive, got %v", c.ttl)
	case c.maxDelay < 0:
		return invalidf("max delay must not be negative, got %v", c.maxDelay)
	case c.loc == nil:
		return invalidf("nil location")
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

// WithSkew bounds each replica's clock offset to the lock nodes plus its
// cron's delivery delay: within it each tick runs at most once; a run later
// than the skew after its activation is skipped (OutcomeSkippedBeyondSkew);
// offsets above half of it are warned of. Default: 1s. (docs/guide/CRON.md)
func WithSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithTTL sets the TTL of the job's running lock, kept alive while it runs:
// if the replica dies, later ticks run elsewhere within the TTL. It must
// exceed the lock client's node timeout plus drift. Default: 5s.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithDelayIfRunning makes a tick whose previous run still runs (on any
// replica) wait for it, at most maxDelay from the tick (0: the schedule's
// smallest interval), then run once as that tick (OutcomeLate, then its
// outcome); use it rather than cron.DelayIfStillRunning. Default: the tick
// is skipped (OutcomeSkippedOverlap), as cron.SkipIfStillRunning would.
func WithDelayIfRunning(maxDelay time.Duration) Option {
	return func(c *config) { c.delay, c.maxDelay = true, maxDelay }
}

// WithLocation sets the zone of specs without a CRON_TZ= prefix, so that
// replicas in different zones agree; with WithSpec (or NewJobs) it must be
// the zone of the cron that runs the job. Daylight saving time skips or
// repeats a daily job as robfig/cron does; UTC avoids both. Default: UTC.
func WithLocation(loc *time.Location) Option { return func(c *config) { c.loc = loc } }

// WithLogger sets the logger of the job's changes of state: nothing above
// Debug while healthy; a Warn (skips, lock errors, a caught-up tick, clock
// offsets) or an Error (failures, panics with their stack) once per change,
// repeats at Debug, and "cron job back to normal" at Info once it ends.
// Default (or nil): slog.Default(), as in redlock and middleware.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook called once per run with its outcome (once
// more when a late run starts) and per clock measurement (OutcomeClock),
// e.g. for metrics. It runs on the run's goroutine: it must be fast, must
// not block, and may be called concurrently. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// WithSpec gives Singleton the spec the job was added to the cron with: a
// run's tick is then the latest activation within the skew before it (late
// deliveries tolerated), and tick records last most of the interval.
// "@every" is refused (robfig counts it from each cron's start: use Every);
// a Scheduler refuses the option. Default: a run's tick is its whole second.
func WithSpec(spec string) Option {
	return func(c *config) { c.spec, c.hasSpec, c.schedule = spec, true, nil }
}

// WithCatchUp turns catch-up on: when a Scheduler starts (or registers a
// job after), the job's latest activation within deadline runs once, on one
// replica, unless a replica ran it (OutcomeLate, then its outcome). Tick
// records then last the deadline (a key per tick: give every replica the
// same deadline). Singleton and NewJobs refuse it. Default: 0, off.
func WithCatchUp(deadline time.Duration) Option { return func(c *config) { c.catchUp = deadline } }

// withClock sets the clock from which a run's tick is told: the clock of
// the cron that runs the job (see internal/cronsim).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// withReplica names this replica (see internal/cronsim).
func withReplica(name string) Option { return func(c *config) { c.replica = name } }

// defaultReplica is "<hostname>:<pid>".
func defaultReplica() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}
