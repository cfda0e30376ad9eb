package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// specParser reads 6 fields (seconds first) or 5 (minute first),
// descriptors (@hourly, @every 10s) and a CRON_TZ= or TZ= prefix.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parse reads a spec in loc (unless it has a zone). "@every d" becomes
// Every(d) unless keepEvery: robfig's ConstantDelaySchedule counts from
// each cron's start, so replicas would not share its ticks (Singleton
// keeps it, to refuse it with the way out).
func parse(spec string, loc *time.Location, keepEvery bool) (cron.Schedule, error) {
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, invalidf("cron spec %q: %v", spec, err)
	}
	switch v := s.(type) {
	case cron.ConstantDelaySchedule:
		if !keepEvery {
			return everySchedule{interval: v.Delay}, nil
		}
	case *cron.SpecSchedule:
		if v.Location == time.Local && loc != time.Local {
			c := *v
			c.Location = loc
			return &c, nil
		}
	}
	return s, nil
}

// tickFor returns the activation of s a run starting at now belongs to: the
// latest t with now−late ≤ t ≤ now, or else the next one if at most early
// ahead (a clock slewed between cron's timer and the run reads a hair before).
func tickFor(s cron.Schedule, now time.Time, late, early time.Duration) (tick time.Time, ok bool) {
	t := s.Next(now.Add(-late - time.Nanosecond)) // Next is strictly after its argument
	switch {
	case t.IsZero():
		return time.Time{}, false
	case t.After(now) && t.Sub(now) <= early:
		return t, true
	case t.After(now):
		return time.Time{}, false
	}
	for range 100_000 { // bounds the activations stepped over
		n := s.Next(t)
		if n.IsZero() || n.After(now) {
			break
		}
		t = n
	}
	return t, true
}

// minGap returns the smallest interval between the next 100 activations of
// s after from (0 if it activates at most once); never: none at all.
func minGap(s cron.Schedule, from time.Time) (gap time.Duration, never bool) {
	t := s.Next(from)
	if t.IsZero() {
		return 0, true
	}
	for range 100 {
		n := s.Next(t)
		if n.IsZero() {
			break
		}
		if d := n.Sub(t); gap == 0 || d < gap {
			gap = d
		}
		t = n
	}
	return gap, false
}

// Every returns a schedule that activates at every multiple of interval
// (truncated to a whole millisecond; under 1ms never) since the Unix epoch:
// Every(10*time.Second) at :00, :10, :20 and so on. Unlike robfig's
// "@every" its ticks do not depend on when each cron started, so replicas
// share them: c.Schedule(scheduler.Every(d), job). A Scheduler reads
// "@every d" this way by itself.
func Every(interval time.Duration) cron.Schedule { return everySchedule{interval: interval} }

type everySchedule struct{ interval time.Duration }

// Next returns the first multiple of the interval strictly after t, in t's
// location.
func (s everySchedule) Next(t time.Time) time.Time {
	d := s.interval.Truncate(time.Millisecond).Nanoseconds()
	if d <= 0 {
		return time.Time{}
	}
	return time.Unix(0, (t.UnixNano()-floorMod(t.UnixNano(), d))+d).In(t.Location())
}

// floorMod is n modulo d, in [0, d) (times before the epoch too).
func floorMod(n, d int64) int64 { return ((n % d) + d) % d }
