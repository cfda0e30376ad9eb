package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDecorateExample runs the example and checks each policy did its job.
func TestDecorateExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"adjusted A-1 by 5 under task:stock:adjust:A-1",
		"adjusted A-1 by -2 under task:stock:adjust:A-1",
		"released reservation under task:stock:adjust:B-7 because:",
		"rollback stock:adjust: task:stock:adjust:B-7 (err: <nil>)",
		"built report daily",
		"built report weekly",
		"sent e-mail welcome:ada@example.com",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "sent e-mail"); n != 1 {
		t.Errorf("the duplicate e-mail went out %d times:\n%s", n, s)
	}
	if !strings.Contains(s, "conflict email:send") || !strings.Contains(s, "-> skip") {
		t.Errorf("no skipped duplicate:\n%s", s)
	}
}
