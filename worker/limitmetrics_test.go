package worker

import (
	"testing"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestLimitChangesCounted: each EventLimitChange of the lock client counts
// once, as "started" while several limits are in use and "done" once one
// is left; other events leave the counter alone.
func TestLimitChangesCounted(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.zero("wait")
	m.observeLock(redlock.Event{Kind: redlock.EventLimitChange, Resource: "r", Limits: []int{3, 5}})
	m.observeLock(redlock.Event{Kind: redlock.EventLimitChange, Resource: "s", Limits: []int{1, 3}})
	m.observeLock(redlock.Event{Kind: redlock.EventLimitChange, Resource: "r", Limits: []int{5}})
	m.observeLock(redlock.Event{Kind: redlock.EventLost, Resource: "r"})
	for phase, want := range map[string]float64{"started": 2, "done": 1} {
		var c dto.Metric
		if err := m.limitChanges.WithLabelValues(phase).Write(&c); err != nil {
			t.Fatal(err)
		}
		if v := c.GetCounter().GetValue(); v != want {
			t.Errorf("asynqlock_lock_limit_changes_total{phase=%q} = %v, want %v", phase, v, want)
		}
	}
}
