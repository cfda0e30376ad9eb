package scheduler

import (
	"time"
)

// catchUpLater runs the job's latest missed tick in the background, if it
// has WithCatchUp and no replica ran that tick. The tick records, kept for
// the deadline plus the tick window, tell whether one did: a replica that
// ran the tick holds its lock still, and whoever wins it now runs it once.
func (r *runner) catchUpLater() {
	if r.cfg.catchUp <= 0 || r.sched == nil || r.host.wg == nil {
		return
	}
	r.host.wg.Add(1)
	go func() {
		defer r.host.wg.Done()
		start := time.Now()
		now := r.cfg.now().In(r.cfg.loc)
		// The latest activation at or before now, within the deadline;
		// older ones are not run.
		tick, ok := tickFor(r.sched, now, r.cfg.catchUp, 0)
		if !ok || r.stopped() {
			return
		}
		r.runTick(Event{Tick: tick}, start, true)
	}()
}
