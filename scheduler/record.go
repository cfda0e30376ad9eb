package scheduler

import (
	"context"
	"fmt"
	"time"
)

// lost handles a tick whose lock another replica holds: the common case,
// reported at Debug. The lock is the record of the tick, kept for most of
// the interval; when its age shows that it was won earlier than any
// replica within the skew could have started the tick, this replica (or
// the winner) is beyond the skew: the tick is still skipped, at Warn.
// ttls are the TTLs the record may have been written with.
func (r *runner) lost(ev Event, resource string, ttls []time.Duration, start time.Time, err error) {
	ev.Outcome, ev.Err = OutcomeSkippedOtherReplica, err
	ctx, cancel := context.WithTimeout(r.host.stopping, releaseTimeout)
	remaining, token, ok := r.locks.Record(ctx, resource)
	cancel()
	r.mu.Lock()
	r.state.otherRanBy = holderOf(token)
	r.mu.Unlock()
	if ok {
		// The youngest age that explains the remaining TTL.
		age := time.Duration(-1)
		for _, ttl := range ttls {
			if a := ttl - remaining; a >= 0 && (age < 0 || a < age) {
				age = a
			}
		}
		earlier := age - time.Since(start) // how long before this run started it was won
		if age >= 0 && earlier > 2*r.cfg.skew+r.budget {
			ev.Outcome = OutcomeSkippedBeyondSkew
			ev.Err = fmt.Errorf("scheduler: tick already run by another replica %v before this run started, more than twice the skew %v: "+
				"a clock offset or delivery delay beyond the skew (%w)", earlier.Round(time.Millisecond), r.cfg.skew, err)
		}
	}
	r.report(ev)
}
