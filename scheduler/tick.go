package scheduler

import (
	"fmt"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// gapSamples is how many successive activations are examined to find a
// schedule's smallest interval.
const gapSamples = 100

// specParser accepts 5-field specs (minute first) and 6-field specs (seconds
// first), descriptors such as @hourly and @every, and a CRON_TZ= or TZ=
// prefix.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parse parses a cron spec the way Scheduler does: 6 fields (seconds
// first) or 5 (minute first), descriptors (@daily, @every 10s), and an
// optional CRON_TZ=Zone prefix. Specs without a prefix are interpreted in
// loc (time.UTC if nil).
//
// "@every d" becomes Every(d), aligned to the Unix epoch, instead of cron's
// ConstantDelaySchedule, whose activations depend on when each replica's
// cron started and so would differ between replicas.
func parse(spec string, loc *time.Location) (cron.Schedule, error) {
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: cron spec %q: %w", ErrInvalid, spec, err)
	}
	return normalize(s, loc), nil
}

// normalize replaces cron's replica-dependent @every schedule with the
// aligned one and pins spec schedules without a zone to loc.
func normalize(s cron.Schedule, loc *time.Location) cron.Schedule {
	switch v := s.(type) {
	case cron.ConstantDelaySchedule:
		return everySchedule{interval: v.Delay}
	case *cron.SpecSchedule:
		if loc == nil {
			loc = time.UTC
		}
		if v.Location == time.Local && loc != time.Local {
			c := *v
			c.Location = loc
			return &c
		}
	}
	return s
}

// Every returns a schedule that activates at every multiple of interval
// since the Unix epoch (1970-01-01 00:00:00 UTC): Every(time.Hour) at the
// top of each UTC hour, Every(10*time.Second) at :00, :10, :20 and so on.
// Unlike robfig's "@every" (cron.ConstantDelaySchedule) its activations do
// not depend on when the cron started, so every replica shares them:
// schedule a Singleton job with c.Schedule(scheduler.Every(d), job). A
// Scheduler reads "@every d" this way by itself. The interval is truncated
// to a whole millisecond; an interval under 1ms never activates.
func Every(interval time.Duration) cron.Schedule {
	return everySchedule{interval: interval}
}

// everySchedule is the schedule Every returns.
type everySchedule struct {
	interval time.Duration
}

// Next returns the first multiple of the interval since the Unix epoch
// strictly after t, in t's location, or the zero time if the interval is
// under a millisecond.
func (s everySchedule) Next(t time.Time) time.Time {
	d := s.interval.Truncate(time.Millisecond).Nanoseconds()
	if d <= 0 {
		return time.Time{}
	}
	n := t.UnixNano()
	k := n / d
	if n%d < 0 {
		k-- // floor for times before the epoch
	}
	return time.Unix(0, (k+1)*d).In(t.Location())
}

// maxScan bounds the activations tickFor steps over.
const maxScan = 100_000

// tickFor returns the activation of s to which a run starting at now
// belongs: the latest activation t with now−late ≤ t ≤ now, or else the
// next one if it is at most early ahead (robfig never fires early by its
// own clock, but a clock slewed between its timer and the run may read a
// hair before the activation). ok is false when none qualifies.
func tickFor(s cron.Schedule, now time.Time, late, early time.Duration) (tick time.Time, ok bool) {
	// Schedule.Next is strictly after its argument: this is the first
	// activation at or after now−late.
	t := s.Next(now.Add(-late - time.Nanosecond))
	switch {
	case t.IsZero():
		return time.Time{}, false
	case t.After(now) && t.Sub(now) <= early:
		return t, true
	case t.After(now):
		return time.Time{}, false
	}
	for range maxScan {
		n := s.Next(t)
		if n.IsZero() || n.After(now) {
			break
		}
		t = n
	}
	return t, true
}

// secondTick is the tick of a run when the schedule is not known: robfig's
// schedules all activate on whole seconds and cron never fires before an
// activation by its own clock, so a run that starts less than a second
// after its activation belongs to the whole second at or before it.
func secondTick(now time.Time) time.Time { return now.Truncate(time.Second) }

// minGap returns the smallest interval between successive activations of s
// among the next gapSamples after from, and 0 when s activates at most once.
// never is true when s never activates after from.
func minGap(s cron.Schedule, from time.Time) (gap time.Duration, never bool) {
	t := s.Next(from)
	if t.IsZero() {
		return 0, true
	}
	for range gapSamples {
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

// taskID returns the asynq task ID the bridge gives the task of job name's
// tick: "cron:<name>:<tick in Unix milliseconds>".
func taskID(name string, tick time.Time) string {
	return tickResource(name, tick)
}

// tickResource is the lock resource of one tick of a job.
func tickResource(name string, tick time.Time) string {
	return "cron:" + name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// runningResource is the lock resource held while a job runs.
func runningResource(name string) string {
	return "cron:" + name + ":running"
}
