package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestLimitExample runs the example: every import runs, and never more
// than 3 of one tenant at once.
func TestLimitExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []struct {
		name    string
		imports int
	}{{"acme", 12}, {"globex", 4}} {
		var got, peak, limit int
		line := lineOf(out.String(), tenant.name+":")
		if _, err := fmt.Sscanf(line, tenant.name+": %d imports, at most %d at once (limit %d)", &got, &peak, &limit); err != nil {
			t.Fatalf("%v in %q:\n%s", err, line, out.String())
		}
		if got != tenant.imports || peak < 1 || peak > 3 || limit != 3 {
			t.Errorf("%s: %d imports (want %d), at most %d at once (want 1 to 3)", tenant.name, got, tenant.imports, peak)
		}
	}
}

func lineOf(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
