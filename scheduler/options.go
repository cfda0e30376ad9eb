package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
)

var (
	errStopped = errors.New("scheduler: stopped") // cause of the jobs Stop's context cut short
	errNoTick  = errors.New("scheduler: run is not within the skew of an activation")
)

// invalidError is input that cannot work, refused where it is made (a nil
// client or job, a bad or duplicate name, a spec that does not parse or
// never activates, a bad option): it names the job and the fault, and
// matches redlock.ErrInvalid, the one sentinel of bad input.
type invalidError string

func (e invalidError) Error() string { return "scheduler: invalid argument: " + string(e) }

func (e invalidError) Unwrap() error { return redlock.ErrInvalid }

func invalidf(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

func init() {
	cronsim.Clock = func(now func() time.Time) any { return withClock(now) }
	cronsim.Replica = func(name string) any { return withReplica(name) }
}

type config struct {
	skew, ttl time.Duration
	delay     bool          // WithDelayIfRunning
	maxDelay  time.Duration // 0: the schedule's interval
	loc       *time.Location
	logger    *slog.Logger
	observer  func(Event)
	spec      string
	hasSpec   bool
	schedule  cron.Schedule // tests': a schedule no spec writes
	catchUp   time.Duration // 0: off
	now       func() time.Time
	replica   string
	anyName   bool                 // NewJobs: job names another cron library gives
	tp        trace.TracerProvider // nil: the global one
}

func defaultConfig() config {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return config{skew: time.Second, ttl: 5 * time.Second, loc: time.UTC, logger: slog.Default(),
		now: time.Now, replica: h + ":" + strconv.Itoa(os.Getpid())}
}

// apply applies opts for use ("Singleton", "a Scheduler" or "NewJobs"),
// refusing the options that are another use's.
func (c *config) apply(opts []Option, use string) error {
	for _, o := range opts {
		if o == nil {
			return invalidf("nil option")
		}
		o(c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
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
	case (c.hasSpec || c.schedule != nil) && use != "Singleton":
		return invalidf("WithSpec is for Singleton, not for %s: give the spec with the job", use)
	case c.catchUp > 0 && use != "a Scheduler":
		return invalidf("WithCatchUp is for a Scheduler, not for %s: it cannot know when its cron starts", use)
	}
	return nil
}

// checkName rejects names that cannot be part of a lock key; the names
// another cron library gives (NewJobs) only if empty or too long.
func checkName(name string, anyName bool) error {
	switch {
	case name == "":
		return invalidf("empty job name: name each job (with gocron: gocron.WithName)")
	case len(name) > 200:
		return invalidf("job name %.20q…: longer than 200 bytes", name)
	case anyName:
	case strings.ContainsAny(name, "{}"):
		return invalidf("job name %q: contains '{' or '}'", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return invalidf("job name %q: contains whitespace or control characters", name)
	}
	return nil
}

// Option configures a Singleton wrapper, a Scheduler (defaults for all its
// jobs), one job registered with it (overriding them), or NewJobs.
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
// replica) wait for it, at most maxDelay (0: the schedule's smallest
// interval), then run once (OutcomeLate, then its outcome), in place of
// cron.DelayIfStillRunning. Default: the tick is skipped (OutcomeSkippedOverlap).
func WithDelayIfRunning(maxDelay time.Duration) Option {
	return func(c *config) { c.delay, c.maxDelay = true, maxDelay }
}

// WithLocation sets the zone of specs without a CRON_TZ= prefix, so that
// replicas in different zones agree; with WithSpec (or NewJobs) it must be
// the zone of the cron that runs the job. Default: UTC.
func WithLocation(loc *time.Location) Option { return func(c *config) { c.loc = loc } }

// WithLogger sets the logger of the job's changes of state (package
// statelog): a Warn or an Error (failures, with a panic's stack) once per
// change, repeats at Debug, one Info when it ends. Default (or nil):
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook called once per run with its outcome (once
// more when a late run starts) and per clock measurement (OutcomeClock). It
// runs on the run's goroutine: it must be fast and may be called
// concurrently. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// WithSpec gives Singleton the spec the job was added to the cron with: a
// run's tick is then the latest activation within the skew before it (late
// deliveries tolerated), and tick records last most of the interval.
// "@every" is refused (use Every). Default: a run's tick is its whole second.
func WithSpec(spec string) Option { return func(c *config) { c.spec, c.hasSpec = spec, true } }

// WithCatchUp makes a Scheduler run, when it starts (or registers the job
// after), the job's latest activation within deadline once, on one replica,
// unless a replica ran it (OutcomeLate, then its outcome). Tick records then
// last the deadline: give every replica the same. Default: 0, off.
func WithCatchUp(deadline time.Duration) Option { return func(c *config) { c.catchUp = deadline } }

// WithTracerProvider sets the provider of the span asynqlock.cron.tick, one
// per tick a replica handles, with the job and outcome; the job's context
// carries it. Default (or nil): otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// withClock (the clock of the cron that runs the job) and withReplica are
// the simulation's (internal/cronsim).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

func withReplica(name string) Option { return func(c *config) { c.replica = name } }
