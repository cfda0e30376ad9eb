package scheduler

import (
	"context"
)

// Check measures this process's clock offset to each lock node with
// redlock's Check (the node's TIME at the midpoint of the round trip).
func (r redlockLocker) Check(ctx context.Context) ([]ClockReport, error) {
	reps, err := r.c.Check(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ClockReport, len(reps))
	for i, n := range reps {
		out[i] = ClockReport{Node: n.Addr, Offset: n.ClockOffset, RTT: n.RTT}
		if n.RTT == 0 {
			// TIME did not answer. (A node may fail a later part of the
			// check, such as INFO on an embedded Redis, and still have
			// measured its clock: RTT is the TIME round trip.)
			out[i].Err = n.Err
		}
	}
	return out, nil
}
