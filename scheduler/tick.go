package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// gapSamples is how many successive activations are examined to find a
// schedule's smallest interval; maxScan bounds the activations tickFor
// steps over.
const (
	gapSamples = 100
	maxScan    = 100_000
)

// tickFor returns the activation of s to which a run starting at now
// belongs: the latest activation t with now−late ≤ t ≤ now, or else the
// next one if it is at most early ahead (a cron never fires early by its
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

// minGap returns the smallest interval between successive activations of s
// among the next gapSamples after from, and 0 when s activates at most
// once. never is true when s never activates after from.
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

// secondTick is the tick of a run when the schedule is not known: robfig's
// schedules all activate on whole seconds and cron never fires before an
// activation by its own clock, so a run that starts less than a second
// after its activation belongs to the whole second at or before it.
func secondTick(now time.Time) time.Time { return now.Truncate(time.Second) }
