package checker

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestWriteEvidence: the evidence of a failed check can be read back and
// checked again to the same result, and its account and timeline show the
// violation.
func TestWriteEvidence(t *testing.T) {
	h := History{
		Sections: []Section{
			sec("p1/0", 1_000_000, 9_000_000, "", "1"),
			sec("p2/0", 5_000_000, 12_000_000, "", "2"),
			sec("p3/0", 13_000_000, 14_000_000, "2", ""),
		},
		Final:  map[string]string{"r": "2"},
		Events: []Event{{At: 2_000_000, What: "kill node 0"}},
	}
	r := Check(h)
	dir := filepath.Join(t.TempDir(), "a", "b")
	got, err := WriteEvidence(dir, h, r)
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Fatalf("WriteEvidence returned %q, want %q", got, dir)
	}
	h2, r2, err := ReadEvidence(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h2, h) || !reflect.DeepEqual(r2, r) {
		t.Fatalf("read back %+v / %+v", h2, r2)
	}
	if r3 := Check(h2); !reflect.DeepEqual(r3, r) {
		t.Fatalf("replayed check differs: %s vs %s", r3, r)
	}

	text, err := os.ReadFile(filepath.Join(dir, ViolationsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"overlap on \"r\"", "p1/0", "p2/0", "kill node 0", "lost-update", "+4ms"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("%s lacks %q:\n%s", ViolationsFile, want, text)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	s := string(svg)
	if !strings.HasPrefix(s, "<svg") || !strings.HasSuffix(strings.TrimSpace(s), "</svg>") ||
		strings.Count(s, "<rect") != 3 || !strings.Contains(s, "#d22") || !strings.Contains(s, "kill node 0") {
		t.Fatalf("timeline:\n%s", s)
	}
}
