package middleware

import (
	"context"
	"slices"
	"testing"
)

// TestParkedTasksListsWhatParkRecorded: the listing reads the FIFO records
// park writes, per resource and queue, oldest first, and nothing else.
func TestParkedTasksListsWhatParkRecorded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := &mw{cfg: config{broker: e.raw}}
	for _, p := range []struct {
		queue, res, id string
		copy           bool
	}{
		{"default", "sku:A", "t1", false},
		{"default", "sku:A", "t2-copy", true},
		{"default", "sku:B", "t3", false},
		{"low", "sku:A", "t4", false},
		{"other", "sku:C", "t5", false}, // a queue not asked for
	} {
		if _, err := m.park(ctx, p.queue, p.res, "run-"+p.id, p.id, p.copy); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ParkedTasks(ctx, e.raw, "default", "low")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"sku:A": {"t1", "t2-copy", "t4"}, "sku:B": {"t3"}}
	if len(got) != len(want) {
		t.Fatalf("parked %v, want %v", got, want)
	}
	for res, ids := range want {
		if !slices.Equal(got[res], ids) {
			t.Errorf("%s: parked %v, want %v", res, got[res], ids)
		}
	}
}
