package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func demoConfig(noLock bool) config {
	return config{noLock: noLock, replicas: 3, workers: 6, skus: 8, updates: 400, hot: 0.5, work: time.Millisecond}
}

// TestDemoLosesNoUpdateWithLocks runs the demo as a user would (embedded
// servers): with locks every SKU ends at its expected stock.
func TestDemoLosesNoUpdateWithLocks(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	t.Setenv("INVENTORY_STORE_URL", "")
	var out bytes.Buffer
	lost, err := run(context.Background(), demoConfig(false), &out)
	if err != nil {
		t.Fatal(err)
	}
	if lost != 0 {
		t.Fatalf("%d units lost with locks:\n%s", lost, out.String())
	}
	for _, want := range []string{"embedded in-process lock nodes", "SKU-HOT", "off by 0 units"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoShowsLostUpdatesWithoutLocks: the same run without locks loses
// updates, so the demo's check is known to be able to fail.
func TestDemoShowsLostUpdatesWithoutLocks(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	t.Setenv("INVENTORY_STORE_URL", "")
	lost, err := run(context.Background(), demoConfig(true), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 {
		t.Fatal("no update lost without locks: the demo cannot show what the lock prevents")
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	err := validate(config{replicas: 0, workers: 1, skus: 1, updates: 0, hot: 2})
	for _, want := range []string{"-replicas", "-skus", "-updates", "-hot"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}
