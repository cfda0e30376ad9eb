package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func demoConfig(noLock bool) config {
	c := defaults()
	c.noLock, c.updates, c.skus, c.hot, c.concurrency = noLock, 400, 8, 0.3, 6
	c.logs = slog.New(slog.DiscardHandler)
	return c
}

func clearEnv(t *testing.T) {
	for _, v := range []string{"REDLOCK_NODES", "ASYNQ_REDIS_URL", "INVENTORY_STORE_URL"} {
		t.Setenv(v, "")
	}
}

// TestDemoLosesNoUpdateWithLocks runs the demo as a user would (embedded
// servers, three worker replicas): every SKU ends at its expected stock.
func TestDemoLosesNoUpdateWithLocks(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	res, err := run(context.Background(), demoConfig(false), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.lost != 0 || res.skusOff != 0 {
		t.Fatalf("%d units lost on %d SKUs with locks:\n%s", res.lost, res.skusOff, out.String())
	}
	for _, want := range []string{"5 embedded in-process lock nodes", "embedded in-process asynq broker", "SKU-HOT", "0 SKUs wrong, 0 stock units lost"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoShowsLostUpdatesWithoutLocks: the same run without locks loses
// updates, so the demo's check is known to be able to fail.
func TestDemoShowsLostUpdatesWithoutLocks(t *testing.T) {
	clearEnv(t)
	cfg := demoConfig(true)
	cfg.work = 2 * time.Millisecond
	res, err := run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if res.lost == 0 {
		t.Fatal("no update lost without locks: the demo cannot show what the lock prevents")
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	c := defaults()
	c.replicas, c.skus, c.updates, c.hot = 0, 1, 0, 2
	err := c.validate()
	for _, want := range []string{"-replicas", "-skus", "-updates", "-hot"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}
