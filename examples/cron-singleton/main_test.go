package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestEachTickRunsOnce runs the example: three replicas, whose ticks
// arrive on time, 700ms and 300ms late; every tick ran on at most one.
func TestEachTickRunsOnce(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	var out bytes.Buffer
	runs, err := run(context.Background(), 3, &out)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for tick, n := range runs {
		if n > 1 {
			t.Fatalf("tick %v ran %d times:\n%s", tick, n, out.String())
		}
		ran += n
	}
	// A loaded machine may deliver a tick to every replica later than the
	// skew: it is then skipped everywhere (and logged), never run twice.
	if ran < 2 {
		t.Fatalf("only %d ticks ran:\n%s", ran, out.String())
	}
	for _, want := range []string{"ran exactly once across 3 replicas", "replica-2 +7"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLogsInOneFormat: the example's log lines all come from the one logger
// it gives its lock clients and schedulers (text, "time=... level=..."),
// none from slog.Default() (the log package's "2006/01/02 15:04:05" lines,
// on stderr), and none says a lock was lost: tick records expire by design.
// The control writes through slog.Default() to show the capture works.
// Before, the lock clients logged a false "redlock lock lost" per tick to
// slog.Default().
func TestLogsInOneFormat(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	var stray bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&lockedWriter{w: &stray}, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	var out bytes.Buffer
	// Six ticks outlive the first tick's record (5s): its expiry is in.
	if _, err := run(context.Background(), 6, &out); err != nil {
		t.Fatal(err)
	}
	if stray.Len() != 0 {
		t.Fatalf("the example logged to slog.Default():\n%s", stray.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "level=") && !strings.HasPrefix(line, "time=") {
			t.Errorf("log line in another format: %s", line)
		}
		if strings.Contains(line, "lock lost") {
			t.Errorf("false loss: %s", line)
		}
	}
	slog.Warn("control")
	if !strings.Contains(stray.String(), "control") {
		t.Fatal("slog.Default() is not captured")
	}
}
