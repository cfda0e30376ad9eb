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
	cronsim.Clock = func(now func() time.Time) any { return WithClock(now) }
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

// WithSkew bounds, for each replica, the offset of its clock from the lock
// nodes' clocks (ahead or behind) plus the delay with which its cron
// delivers a tick. Each tick runs at most once across replicas within that
// bound; a run that starts later than the skew after its activation is
// skipped (OutcomeSkippedBeyondSkew). Replicas measure their offset and
// warn above half the skew. A won tick is remembered for
// 2·skew + 2·max(skew, 250ms) at least, and for most of the schedule's
// interval when it is known. Default: 1s.
func WithSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithTTL sets the TTL of the job's "running" lock. It is kept alive while
// the job runs; if the replica dies, the lock expires within the TTL and
// later ticks run on other replicas. It must exceed the lock client's node
// timeout plus its drift allowance. Default: 5s.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithDelayIfRunning makes a tick whose previous run is still running (on
// this replica or another) wait for it to end, at most maxDelay from the
// tick's start (0: the smallest interval of the schedule), then run: it
// still counts as that tick and runs once across replicas (OutcomeLate,
// then the run's outcome). A tick that waited in vain is reported with
// OutcomeSkippedOverlap. Use it rather than cron.DelayIfStillRunning.
// Default: such a tick is skipped (OutcomeSkippedOverlap), as
// cron.SkipIfStillRunning would, across replicas.
func WithDelayIfRunning(maxDelay time.Duration) Option {
	return func(c *config) { c.delay, c.maxDelay = true, maxDelay }
}

// WithLocation sets the time zone in which specs without a CRON_TZ= prefix
// are interpreted, so that replicas in different zones agree (asynq's own
// scheduler does the same). With Singleton and WithSpec it must be the
// location of the cron.Cron that runs the job (cron.WithLocation). In a
// zone with daylight saving time a daily job is skipped on the day the
// clock springs over its time and runs twice when it falls back over it,
// as robfig/cron does; choose UTC to avoid both. Default: time.UTC.
func WithLocation(loc *time.Location) Option { return func(c *config) { c.loc = loc } }

// WithLogger sets the structured logger of the job's changes of state. A
// healthy job logs nothing above Debug (runs, ticks another replica ran,
// waits); a Warn (skips, lock errors, a caught-up tick, clock offsets) or
// an Error (failures, panics with their stack) is logged once when the
// job's state changes, its repeats at Debug, and the first healthy run
// after it at Info ("cron job back to normal"). Every event still reaches
// the observer (WithObserver). Default (or nil): slog.Default(), as in
// redlock and middleware, so a failure is seen at the default level while
// a healthy job writes nothing there; pass a discarding logger for silence.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook called once for each run with its outcome
// (and once more when a late run starts), and with each clock measurement
// (OutcomeClock), e.g. to feed metrics. It is called synchronously, on the
// run's goroutine (on a background one for clock measurements): it must be
// fast, must not block, and may be called concurrently. Lock-level events
// (acquisitions, extensions, losses) come from the redlock client's own
// observer. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// WithSpec gives Singleton the cron spec with which the job was added to
// the cron (cron.Cron.AddJob), parsed as a Scheduler parses specs. A run's
// tick is then the latest activation at or before its start, which also
// tolerates deliveries more than a second late, and tick records are kept
// for most of the interval. "@every" specs are refused with ErrInvalid:
// robfig's "@every" counts from each cron's start, so replicas do not
// share its ticks; schedule the job with Every instead. A Scheduler takes
// the spec from Register and refuses this option. Default: none, a run's
// tick is the whole second at which cron activated it.
func WithSpec(spec string) Option {
	return func(c *config) { c.spec, c.hasSpec, c.schedule = spec, true, nil }
}

// WithCatchUp turns catch-up on with the given deadline. When a Scheduler
// starts (or registers a job after it started), the latest activation of
// the job within the deadline before now runs once, on one replica, unless
// some replica already ran it: after an outage in which no replica ran a
// tick, the first replica back runs it (OutcomeLate, then the run's
// outcome). Older missed ticks are not run. Tick records are then kept for
// the deadline plus the tick window, one lock key per tick, so a
// per-second job with a one-hour deadline keeps 3600 keys; give every
// replica the same deadline. A Singleton cannot catch up (it does not know
// when its cron starts): NewSingleton refuses the option. Default: 0, off.
func WithCatchUp(deadline time.Duration) Option { return func(c *config) { c.catchUp = deadline } }

// withClock sets the clock from which a run's tick is told: the clock of
// the cron that runs the job (see internal/cronsim).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

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
