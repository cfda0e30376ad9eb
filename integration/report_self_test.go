package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReliabilityReport checks the report machinery itself: concurrent Add,
// replacement of a row with the same scenario and fault, verdicts, and the
// markdown written (header, one table row per scenario, escaped cells).
func TestReliabilityReport(t *testing.T) {
	var r reliabilityReport
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { r.Add(Row{Scenario: "s", Fault: fmt.Sprintf("f%d", i%4), Ops: i}) })
	}
	wg.Wait()
	if got := len(r.Rows()); got != 4 {
		t.Fatalf("%d rows, want 4 (one per scenario and fault)", got)
	}
	r.Add(Row{Scenario: "s", Fault: "f0", Ops: 99, Recovery: 1500 * time.Microsecond})
	r.Add(Row{Scenario: "a|b", Fault: "none", Lost: 1, Notes: "two\nlines"})
	r.Add(Row{Scenario: "control", Fault: "none", Violations: 3, Control: true})
	r.Add(Row{Scenario: "control 2", Fault: "none", Control: true})
	rows := r.Rows()
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7", len(rows))
	}
	for _, row := range rows[:4] {
		if row.Fault == "f0" && row.Ops != 99 {
			t.Fatalf("row f0 not replaced in place: %+v", rows)
		}
	}
	verdicts := map[string]string{"s": "safe", "a|b": "**UNSAFE**", "control": "detected (control)", "control 2": "**NOT DETECTED**"}
	for _, row := range rows {
		if got := row.Verdict(); got != verdicts[row.Scenario] {
			t.Errorf("%q: verdict %q, want %q", row.Scenario, got, verdicts[row.Scenario])
		}
	}

	path := filepath.Join(t.TempDir(), "docs", "RELIABILITY.md")
	if wrote, err := writeReport(path, nil, 0); wrote || err != nil {
		t.Fatalf("no rows: wrote %v, %v; want nothing written", wrote, err)
	}
	if wrote, err := writeReport(path, rows, 1); !wrote || err != nil {
		t.Fatalf("wrote %v, %v", wrote, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"# Reliability report", reportCommand, "## Assumptions", "delayed-restart rule", "fencing",
		"FAILED (exit status 1)", "| s | f0 | 99 | 0 | 0 | 0 | 1.5ms | safe |", `| a\|b | none |`, "two lines",
		"detected (control)", "**NOT DETECTED**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n| "); n != len(rows)+1 {
		t.Errorf("%d table lines, want a header and %d rows", n, len(rows))
	}
}
