package worker

import (
	"testing"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestParkedGaugeFollowsParkedEvents (issue 25, finding 3): records dropped
// without a promotion (their task came back by itself) bring the parked
// tasks gauge back to zero through the middleware's "parked" event.
func TestParkedGaugeFollowsParkedEvents(t *testing.T) {
	m := newParkMetrics(prometheus.NewRegistry())
	m.observe(middleware.Event{Kind: "conflict", Action: "park", Resource: "r", Parked: 1})
	m.observe(middleware.Event{Kind: "conflict", Action: "park", Resource: "s", Parked: 2})
	m.observe(middleware.Event{Kind: "parked", Resource: "r", Parked: 0})
	m.observe(middleware.Event{Kind: "promoted", Resource: "s", Parked: 1})
	m.observe(middleware.Event{Kind: "promoted", Resource: "s", Parked: 0})
	var g dto.Metric
	if err := m.parked.Write(&g); err != nil {
		t.Fatal(err)
	}
	if v := g.GetGauge().GetValue(); v != 0 {
		t.Fatalf("asynqlock_parked_tasks = %v once nothing is parked, want 0", v)
	}
}
