package gocronlock

import (
	"time"

	"github.com/asynqlock/asynqlock/internal/crontick"
	"github.com/robfig/cron/v3"
)

// schedule tells the tick a run of one job belongs to.
type schedule interface {
	// tick returns the tick of a run starting at now and the end of the
	// window in which replicas may still start it (before the skew); ok is
	// false when the run belongs to no tick.
	tick(now time.Time) (tick, end time.Time, ok bool)
}

// interval is a DurationJob's schedule: the multiples of every since the
// Unix epoch. gocron counts a DurationJob from each scheduler's start, so
// replicas fire at offsets of their own; a run belongs to the interval it
// starts in, by the replica's clock.
type interval struct{ every time.Duration }

func (s interval) tick(now time.Time) (time.Time, time.Time, bool) {
	d := s.every.Nanoseconds()
	n := now.UnixNano()
	k := n / d
	if n%d < 0 {
		k-- // floor for times before the epoch
	}
	t := time.Unix(0, k*d).In(now.Location())
	return t, t.Add(s.every), true
}

// cronTicks is a CronJob's schedule, whose activations every replica
// shares: a run belongs to the latest one at or before it within the skew,
// by the rule of package scheduler (internal/crontick).
type cronTicks struct {
	sched cron.Schedule
	late  time.Duration // the skew
	early time.Duration // a run may start this long before its activation
}

func (s cronTicks) tick(now time.Time) (time.Time, time.Time, bool) {
	t, ok := crontick.Tick(s.sched, now, s.late, s.early)
	return t, t, ok
}

// specParser reads specs as gocron.CronJob does with withSeconds (5 or 6
// fields, descriptors, CRON_TZ=); a 5-field spec means the same either way.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron parses a job's spec and derives its tick rule. A spec without a
// zone is read in loc, as gocron reads it in its scheduler's location.
func parseCron(name, spec string, loc *time.Location, skew time.Duration, now time.Time) (cronTicks, time.Duration, error) {
	s, err := specParser.Parse(spec)
	if err != nil {
		return cronTicks{}, 0, invalidf("job %q: cron spec %q: %v", name, spec, err)
	}
	switch v := s.(type) {
	case cron.ConstantDelaySchedule:
		return cronTicks{}, 0, invalidf("job %q: cron spec %q: gocron counts @every from each scheduler's start, so replicas share no ticks; "+
			"schedule it with gocron.DurationJob and register it with WithInterval", name, spec)
	case *cron.SpecSchedule:
		if v.Location == time.Local && loc != time.Local {
			c := *v
			c.Location = loc
			s = &c
		}
	}
	gap, never := crontick.MinGap(s, now.In(loc))
	if never {
		return cronTicks{}, 0, invalidf("job %q: cron spec %q never activates", name, spec)
	}
	early := max(0, min(skew, (gap-skew)/2))
	return cronTicks{sched: s, late: skew, early: early}, gap, nil
}
