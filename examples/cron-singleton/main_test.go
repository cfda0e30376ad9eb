package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestEachTickRunsOnce runs the example: three replicas, one lagging, and
// every tick ran on exactly one of them.
func TestEachTickRunsOnce(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	var out bytes.Buffer
	runs, err := run(context.Background(), 3, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 2 {
		t.Fatalf("only %d ticks ran:\n%s", len(runs), out.String())
	}
	for tick, n := range runs {
		if n != 1 {
			t.Fatalf("tick %v ran %d times:\n%s", tick, n, out.String())
		}
	}
	if !strings.Contains(out.String(), "ran exactly once across 3 replicas") {
		t.Fatalf("output:\n%s", out.String())
	}
}
