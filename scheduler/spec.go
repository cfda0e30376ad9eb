package scheduler

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

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

// parseSingletonSpec parses a spec given to Singleton, refusing "@every":
// the cron that runs the job reads it as robfig's start-relative schedule.
func parseSingletonSpec(spec string, loc *time.Location) (cron.Schedule, error) {
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: cron spec %q: %w", ErrInvalid, spec, err)
	}
	if _, ok := s.(cron.ConstantDelaySchedule); ok {
		return s, nil // refused by newRunner, with the way out
	}
	return normalize(s, loc), nil
}
