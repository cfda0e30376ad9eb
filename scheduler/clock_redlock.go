package scheduler

import (
	"context"
)

// Check measures this process's clock offset to each lock node with
// redlock's Check (the node's TIME at the midpoint of the round trip).
func (r redlockLocker) Check(ctx context.Context) ([]clockReport, error) {
	reps, err := r.c.Check(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]clockReport, len(reps))
	for i, n := range reps {
		out[i] = clockReport{Node: n.Addr, Offset: n.ClockOffset, RTT: n.RTT, Err: n.Err} // Err: TIME failed
	}
	return out, nil
}
