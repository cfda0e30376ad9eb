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
		"undid the reservation under task:stock:adjust:B-7 because:",
		"rollback stock:adjust: task:stock:adjust:B-7 done",
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
	// Lines come in the order things happened: the rollback hook runs
	// before the middleware reports the rollback, and the duplicate e-mail
	// is skipped while its twin is being sent (sorted, these pairs would
	// come the other way round, or the first by chance only).
	inOrder(t, s, "undid the reservation", "rollback stock:adjust")
	inOrder(t, s, "conflict email:send", "sent e-mail")
}

// inOrder checks that first appears in s before then.
func inOrder(t *testing.T, s, first, then string) {
	t.Helper()
	if i, j := strings.Index(s, first), strings.Index(s, then); i < 0 || j < 0 || i > j {
		t.Errorf("%q should come before %q:\n%s", first, then, s)
	}
}

// TestJournalKeepsEventOrder: the journal prints its lines as they were
// added, not sorted.
func TestJournalKeepsEventOrder(t *testing.T) {
	j := newJournal()
	j.add("second %d", 2)
	j.add("first %d", 1)
	var out bytes.Buffer
	j.print(&out)
	if got := out.String(); got != "second 2\nfirst 1\n" {
		t.Fatalf("printed %q, want the lines in the order added", got)
	}
}
