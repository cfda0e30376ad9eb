// Package crontick tells which activation of a robfig/cron schedule a run
// belongs to: the rule of package scheduler's robfig jobs and of gocronlock's
// gocron cron jobs (gocron uses robfig's schedules), written once.
package crontick

import (
	"time"

	"github.com/robfig/cron/v3"
)

// gapSamples is how many successive activations are examined to find a
// schedule's smallest interval.
const gapSamples = 100

// maxScan bounds the activations Tick steps over.
const maxScan = 100_000

// Tick returns the activation of s to which a run starting at now belongs:
// the latest activation t with now−late ≤ t ≤ now, or else the next one if
// it is at most early ahead (a cron never fires early by its own clock, but
// a clock slewed between its timer and the run may read a hair before the
// activation). ok is false when none qualifies.
func Tick(s cron.Schedule, now time.Time, late, early time.Duration) (tick time.Time, ok bool) {
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

// MinGap returns the smallest interval between successive activations of s
// among the next gapSamples after from, and 0 when s activates at most once.
// never is true when s never activates after from.
func MinGap(s cron.Schedule, from time.Time) (gap time.Duration, never bool) {
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
