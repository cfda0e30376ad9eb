package scheduler

import (
	"time"

	"github.com/asynqlock/asynqlock/internal/crontick"
)

// tickFor returns the activation of a schedule to which a run starting at
// now belongs, within late before it or early ahead (crontick.Tick, shared
// with gocronlock); minGap the schedule's smallest interval (crontick.MinGap).
var (
	tickFor = crontick.Tick
	minGap  = crontick.MinGap
)

// secondTick is the tick of a run when the schedule is not known: robfig's
// schedules all activate on whole seconds and cron never fires before an
// activation by its own clock, so a run that starts less than a second
// after its activation belongs to the whole second at or before it.
func secondTick(now time.Time) time.Time { return now.Truncate(time.Second) }
