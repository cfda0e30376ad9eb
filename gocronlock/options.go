package gocronlock

import (
	"log/slog"
	"time"
)

// Defaults used when no option overrides them.
const (
	defaultSkew   = time.Second
	defaultTTL    = 5 * time.Second
	defaultPrefix = "gocron:"
)

// Option configures a Locker made by New.
type Option func(*config)

type config struct {
	skew     time.Duration
	ttl      time.Duration
	prefix   string
	loc      *time.Location
	logger   *slog.Logger
	observer func(Event)
	now      func() time.Time
	jobs     []jobSpec // in the order given
}

// jobSpec is one job as an option registered it; parsed by New.
type jobSpec struct {
	name  string
	every time.Duration // WithInterval
	spec  string        // WithCron
}

func defaultConfig() config {
	return config{
		skew:   defaultSkew,
		ttl:    defaultTTL,
		prefix: defaultPrefix,
		loc:    time.Local, // gocron's default location
		logger: slog.Default(),
		now:    time.Now,
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
	switch {
	case c.skew <= 0:
		return invalidf("skew must be positive, got %v", c.skew)
	case c.ttl <= 0:
		return invalidf("ttl must be positive, got %v", c.ttl)
	case c.prefix == "":
		return invalidf("empty key prefix: keys would mix with other users of the lock nodes")
	case c.loc == nil:
		return invalidf("nil location")
	case c.now == nil:
		return invalidf("nil clock")
	case len(c.jobs) == 0:
		return invalidf("no job: register each job the locker guards with WithInterval or WithCron under its gocron name (gocron.WithName)")
	}
	return nil
}

// WithInterval registers the job named name (gocron.WithName), scheduled
// with gocron.DurationJob(every). Its ticks are the multiples of every since
// the Unix epoch: a run belongs to the interval in which it starts by this
// replica's clock, whatever the offset at which each replica's gocron
// started it, and each interval runs at most once across replicas. every
// must be a whole number of milliseconds, at least 1ms. A job that gocron
// locks under half of every apart, twice in a row, is warned about once: it
// runs more often than registered, and most of its runs find the tick taken.
func WithInterval(name string, every time.Duration) Option {
	return func(c *config) { c.jobs = append(c.jobs, jobSpec{name: name, every: every}) }
}

// WithCron registers the job named name (gocron.WithName), scheduled with
// gocron.CronJob(spec, withSeconds): 5 fields (minute first) or 6 (seconds
// first), descriptors such as @hourly, and an optional CRON_TZ= or TZ=
// prefix; a spec without one is read in WithLocation's zone. A run's tick is
// the latest activation at or before its start within the skew. "@every" is
// refused: gocron counts it from each scheduler's start, so replicas share
// no ticks; use gocron.DurationJob with WithInterval. A gocron DailyJob,
// WeeklyJob or MonthlyJob is registered as the equivalent cron spec.
func WithCron(name, spec string) Option {
	return func(c *config) { c.jobs = append(c.jobs, jobSpec{name: name, spec: spec}) }
}

// WithSkew bounds, for each replica, the offset of its clock from the lock
// nodes' clocks (ahead or behind) plus the delay with which its gocron
// starts a run. Each tick runs at most once across replicas within that
// bound: a won tick is remembered until the end of its interval (a cron
// tick: its activation) plus 2·skew + 2·max(skew, 250ms). A cron run that
// starts later than the skew after its activation is refused
// (ErrBeyondSkew). Default: 1s.
func WithSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithTTL sets the TTL of a job's running lock, taken by the tick's winner
// and kept alive until gocron unlocks it after the run: a run longer than
// its interval makes the following ticks skip (ErrRunning) on every
// replica; if the replica dies, the lock expires within the TTL and later
// ticks run on other replicas. It must exceed the lock client's node
// timeout plus its drift allowance. Default: 5s.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithPrefix sets the namespace of the locker's keys on the lock nodes,
// after the client's own redlock.WithPrefix: "<prefix><job>:<tick in Unix
// ms>" for tick records and "<prefix><job>:running". Every replica must use
// the same. Default: "gocron:".
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithLocation sets the zone in which cron specs without a CRON_TZ= prefix
// are read: it must be the gocron scheduler's (gocron.WithLocation).
// Default: time.Local, as gocron's.
func WithLocation(loc *time.Location) Option { return func(c *config) { c.loc = loc } }

// WithClock sets the clock from which a run's tick is told: it must be the
// gocron scheduler's (gocron.WithClock), e.g. clock.Now. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger of the jobs' changes of state. A healthy job
// logs nothing above Debug (runs, ticks another replica ran); a lock error,
// an unknown job, a run beyond the skew or a lost running lock is a Warn
// when a job's state changes to it, at Debug while it repeats, and the
// first run after it logs once at Info ("gocron job back to normal").
// Default (or nil): slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver installs a hook called once for each Lock with its outcome,
// and once more when a running lock is lost, e.g. to feed metrics. It is
// called on gocron's goroutines: it must be fast, must not block, and may
// be called concurrently. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }
