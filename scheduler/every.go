package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

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
