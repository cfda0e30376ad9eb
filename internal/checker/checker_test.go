package checker

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// sec builds a section on resource "r" unless the holder says otherwise.
func sec(holder string, start, end int64, read, wrote string) Section {
	return Section{Resource: "r", Holder: holder, Start: start, End: end, Read: read, Wrote: wrote}
}

// counts is what a test expects Check to find.
type counts struct {
	overlaps, stale, lost, dup, fence, final, malformed int
}

func countsOf(r Result) counts {
	return counts{r.Overlaps, r.StaleReads, r.Lost, r.Duplicated, r.FenceInversions, r.FinalMismatches, r.Malformed}
}

func TestCheck(t *testing.T) {
	fenced := func(s Section, f int64) Section { s.Fence = f; return s }
	on := func(s Section, res string) Section { s.Resource = res; return s }
	tests := []struct {
		name  string
		h     History
		want  counts
		kinds []Kind
	}{
		{
			name: "empty",
		},
		{
			name: "sequential chain",
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 11, 20, "1", "2"), sec("c", 25, 30, "2", "3"),
			}, Final: map[string]string{"r": "3"}},
		},
		{
			name: "touching intervals do not overlap",
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 10, 20, "1", "2"),
			}},
		},
		{
			name: "aborted section leaves the register alone",
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 11, 20, "1", ""), sec("c", 21, 30, "1", "3"),
			}, Final: map[string]string{"r": "3"}},
		},
		{
			name: "overlap that loses an update",
			// a and b both read the initial value; b's write wins, a's is lost.
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 5, 15, "", "2"),
			}, Final: map[string]string{"r": "2"}},
			want:  counts{overlaps: 1, stale: 1, lost: 1, dup: 1, final: 0},
			kinds: []Kind{Overlap, StaleRead, LostUpdate, Duplicate},
		},
		{
			name: "overlap whose later write lands first",
			// b starts after a but writes before it: the register keeps a's
			// write, b's is lost and the final value is not b's.
			h: History{Sections: []Section{
				sec("a", 0, 20, "", "1"), sec("b", 5, 10, "", "2"),
			}, Final: map[string]string{"r": "1"}},
			want:  counts{overlaps: 1, stale: 1, lost: 1, dup: 1, final: 1},
			kinds: []Kind{Overlap, StaleRead, FinalMismatch, LostUpdate, Duplicate},
		},
		{
			name: "lost update without overlap",
			// The intervals are disjoint but b did not see a's write (say a
			// clock lied or the register is not linearizable).
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 11, 20, "", "2"),
			}},
			want:  counts{stale: 1, lost: 1, dup: 1},
			kinds: []Kind{StaleRead, LostUpdate, Duplicate},
		},
		{
			name: "long section overlaps several",
			h: History{Sections: []Section{
				sec("a", 0, 100, "", "1"), sec("b", 10, 20, "1", "2"), sec("c", 30, 40, "2", "3"),
			}, Final: map[string]string{"r": "3"}},
			want:  counts{overlaps: 2},
			kinds: []Kind{Overlap, Overlap},
		},
		{
			name: "final value not the last write",
			h: History{Sections: []Section{
				sec("a", 0, 10, "", "1"), sec("b", 11, 20, "1", "2"),
			}, Final: map[string]string{"r": "zzz"}},
			want:  counts{final: 1, lost: 1},
			kinds: []Kind{FinalMismatch, LostUpdate},
		},
		{
			name: "fences increase",
			h: History{Sections: []Section{
				fenced(sec("a", 0, 10, "", "1"), 5), fenced(sec("b", 11, 20, "1", ""), 6), fenced(sec("c", 21, 30, "1", "3"), 100),
			}},
		},
		{
			name: "fence inversion",
			h: History{Sections: []Section{
				fenced(sec("a", 0, 10, "", "1"), 7), fenced(sec("b", 11, 20, "1", "2"), 7), fenced(sec("c", 21, 30, "2", "3"), 3),
			}},
			want:  counts{fence: 2},
			kinds: []Kind{FenceInversion, FenceInversion},
		},
		{
			name: "resources are independent",
			h: History{Sections: []Section{
				on(sec("a", 0, 10, "", "a1"), "x"), on(sec("b", 5, 15, "", "b1"), "y"),
				on(sec("c", 11, 20, "a1", "a2"), "x"), on(sec("d", 16, 25, "b1", "b2"), "y"),
			}},
		},
		{
			name: "malformed records",
			h: History{Sections: []Section{
				sec("a", 10, 5, "", "1"),
				on(sec("b", 0, 1, "", "2"), ""),
				sec("c", 20, 30, "", "3"), sec("d", 31, 40, "3", "3"),
			}},
			want:  counts{malformed: 3},
			kinds: []Kind{Malformed, Malformed, Malformed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.h)
			if got := countsOf(r); got != tt.want {
				t.Fatalf("got %+v, want %+v\n%s\n%v", got, tt.want, r, r.Violations)
			}
			var kinds []Kind
			for _, v := range r.Violations {
				kinds = append(kinds, v.Kind)
			}
			if !slices.Equal(kinds, tt.kinds) {
				t.Fatalf("kinds %v, want %v", kinds, tt.kinds)
			}
			if r.OK() != (len(tt.kinds) == 0) {
				t.Fatalf("OK() = %v with %d violations", r.OK(), len(r.Violations))
			}
			if r.Sections != len(tt.h.Sections) {
				t.Fatalf("Sections = %d", r.Sections)
			}
		})
	}
}

// TestCheckViolationPointsAtSections: each finding names the sections
// involved, so evidence can show both sides.
func TestCheckViolationPointsAtSections(t *testing.T) {
	h := History{Sections: []Section{sec("b", 5, 15, "", "2"), sec("a", 0, 10, "", "1")}}
	r := Check(h)
	if len(r.Violations) == 0 || r.Violations[0].Kind != Overlap {
		t.Fatalf("%v", r.Violations)
	}
	v := r.Violations[0]
	if h.Sections[v.First].Holder != "a" || h.Sections[v.Second].Holder != "b" {
		t.Fatalf("overlap points at %d and %d, want a then b", v.First, v.Second)
	}
}

// TestCheckLongRandomHistories: a long history produced by a correct lock
// passes whatever order it is given in; the same history with one section
// stretched over its successor, or with one write dropped from the register
// chain, fails.
func TestCheckLongRandomHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h History
	h.Final = map[string]string{}
	for _, res := range []string{"x", "y", "z"} {
		now, prev := int64(0), ""
		for i := range 300 {
			start := now + rng.Int64N(50)
			end := start + 1 + rng.Int64N(100)
			wrote := ""
			if rng.IntN(10) != 0 {
				wrote = res + string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('A'+i/260))
			}
			h.Sections = append(h.Sections, Section{Resource: res, Holder: "w", Start: start, End: end, Read: prev, Wrote: wrote, Fence: int64(i + 1)})
			if wrote != "" {
				prev = wrote
			}
			now = end
		}
		h.Final[res] = prev
	}
	rng.Shuffle(len(h.Sections), func(i, j int) { h.Sections[i], h.Sections[j] = h.Sections[j], h.Sections[i] })
	if r := Check(h); !r.OK() {
		t.Fatalf("correct history rejected: %s %v", r, r.Violations[0])
	}

	stretched := History{Sections: slices.Clone(h.Sections), Final: h.Final}
	for i := range stretched.Sections {
		if s := &stretched.Sections[i]; s.Resource == "y" && s.Fence == 150 {
			s.End += 1000
		}
	}
	if r := Check(stretched); r.Overlaps == 0 {
		t.Fatalf("stretched section not caught: %s", r)
	}

	skipped := History{Sections: slices.Clone(h.Sections), Final: h.Final}
	// A writer that did not see its predecessor's write: one update lost.
	victim := -1
	for i, s := range skipped.Sections {
		if s.Resource == "z" && s.Fence >= 200 && s.Wrote != "" && (victim < 0 || s.Fence < skipped.Sections[victim].Fence) {
			victim = i
		}
	}
	skipped.Sections[victim].Read = "stale"
	if r := Check(skipped); r.StaleReads != 1 || r.Lost != 1 {
		t.Fatalf("skipped update not caught: %s", r)
	}
}
