package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Section is one critical section on a resource, as recorded by its holder.
type Section struct {
	// Resource is the locked resource.
	Resource string `json:"resource"`
	// Holder names who held the lock (process and goroutine), for evidence.
	Holder string `json:"holder"`
	// Start is when the section began, in nanoseconds on the shared clock:
	// taken after the acquire returned.
	Start int64 `json:"start"`
	// End is when the section ended: taken after the write returned and
	// before the release was called.
	End int64 `json:"end"`
	// Read is the register's value read at the start; "" if it had none.
	Read string `json:"read"`
	// Wrote is the value written at the end, unique in the history; "" when
	// the section wrote nothing (it gave up, e.g. on the loss of its lock).
	Wrote string `json:"wrote,omitempty"`
	// Fence is the lock's fencing token, 0 if it had none.
	Fence int64 `json:"fence,omitempty"`
	// Note says how the section ended if not cleanly (lock lost, release
	// error); evidence only.
	Note string `json:"note,omitempty"`
}

// Aborted reports whether the section wrote nothing.
func (s Section) Aborted() bool { return s.Wrote == "" }

// Event is something that happened during the run, such as an injected
// fault; evidence only.
type Event struct {
	At   int64  `json:"at"` // on the sections' clock
	What string `json:"what"`
}

// History is everything recorded during one run.
type History struct {
	// Sections in any order.
	Sections []Section `json:"sections"`
	// Final holds each register's value after the run, read from the
	// register itself. A resource missing here is assumed to keep its last
	// write.
	Final map[string]string `json:"final,omitempty"`
	// Events are the faults injected during the run, for the reader.
	Events []Event `json:"events,omitempty"`
}

// Kind classifies a finding.
type Kind string

// The kinds of findings.
const (
	// Overlap: a section began before an earlier section on the same
	// resource had ended. Mutual exclusion was broken.
	Overlap Kind = "overlap"
	// StaleRead: a section did not read what the previous writing section
	// (in start order) wrote.
	StaleRead Kind = "stale-read"
	// LostUpdate: a written value that no later writer read and that is not
	// the register's final value: the update was overwritten unseen.
	LostUpdate Kind = "lost-update"
	// Duplicate: a writer that started from a value another writer had
	// already started from: two updates were built on the same state.
	Duplicate Kind = "duplicate"
	// FenceInversion: a section's fencing token is not larger than that of
	// the section before it.
	FenceInversion Kind = "fence-inversion"
	// FinalMismatch: the register's final value is not the last write.
	FinalMismatch Kind = "final-mismatch"
	// Malformed: a record that cannot be right (ends before it starts, no
	// resource, a written value that is not unique).
	Malformed Kind = "malformed"
)

// Violation is one finding, pointing at the sections involved by their index
// in History.Sections (-1 when there is none).
type Violation struct {
	Kind     Kind   `json:"kind"`
	Resource string `json:"resource"`
	First    int    `json:"first"`
	Second   int    `json:"second"`
	Detail   string `json:"detail"`
}

// Result is the outcome of Check.
type Result struct {
	Sections  int `json:"sections"`  // sections checked
	Writes    int `json:"writes"`    // sections that wrote
	Resources int `json:"resources"` // distinct resources

	Overlaps        int `json:"overlaps"`
	StaleReads      int `json:"staleReads"`
	FenceInversions int `json:"fenceInversions"`
	FinalMismatches int `json:"finalMismatches"`
	Malformed       int `json:"malformed"`
	Lost            int `json:"lost"`       // lost updates
	Duplicated      int `json:"duplicated"` // writers that reused a state

	// Violations lists every finding, by resource then start order.
	Violations []Violation `json:"violations,omitempty"`
}

// Safety counts the findings against mutual exclusion itself: overlaps,
// stale reads, fence inversions, final-value mismatches and malformed
// records. Lost and Duplicated count the updates these cost.
func (r Result) Safety() int {
	return r.Overlaps + r.StaleReads + r.FenceInversions + r.FinalMismatches + r.Malformed
}

// OK reports whether the history shows no violation at all.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// String summarises the result in one line.
func (r Result) String() string {
	s := fmt.Sprintf("%d sections (%d writes) on %d resources: %d overlaps, %d stale reads, %d lost, %d duplicated, %d fence inversions",
		r.Sections, r.Writes, r.Resources, r.Overlaps, r.StaleReads, r.Lost, r.Duplicated, r.FenceInversions)
	if r.FinalMismatches > 0 || r.Malformed > 0 {
		s += fmt.Sprintf(", %d final mismatches, %d malformed", r.FinalMismatches, r.Malformed)
	}
	return s
}

// Check verifies h and reports every violation it finds. It never fails: a
// history it cannot make sense of shows up as Malformed findings.
func Check(h History) Result {
	res := Result{Sections: len(h.Sections)}
	byRes := map[string][]int{}
	for i, s := range h.Sections {
		if !s.Aborted() {
			res.Writes++
		}
		switch {
		case s.Resource == "":
			res.add(Violation{Kind: Malformed, First: i, Second: -1, Detail: "section has no resource"})
			continue
		case s.End < s.Start:
			res.add(Violation{Kind: Malformed, Resource: s.Resource, First: i, Second: -1,
				Detail: fmt.Sprintf("section ends %v before it starts", time.Duration(s.Start-s.End))})
			continue
		}
		byRes[s.Resource] = append(byRes[s.Resource], i)
	}
	res.Resources = len(byRes)
	names := make([]string, 0, len(byRes))
	for name := range byRes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		idx := byRes[name]
		slices.SortStableFunc(idx, func(a, b int) int {
			sa, sb := h.Sections[a], h.Sections[b]
			return cmp.Or(cmp.Compare(sa.Start, sb.Start), cmp.Compare(sa.End, sb.End))
		})
		final, known := h.Final[name]
		res.checkResource(h.Sections, name, idx, final, known)
	}
	return res
}

func (r *Result) add(v Violation) {
	switch v.Kind {
	case Overlap:
		r.Overlaps++
	case StaleRead:
		r.StaleReads++
	case LostUpdate:
		r.Lost++
	case Duplicate:
		r.Duplicated++
	case FenceInversion:
		r.FenceInversions++
	case FinalMismatch:
		r.FinalMismatches++
	case Malformed:
		r.Malformed++
	}
	r.Violations = append(r.Violations, v)
}

// checkResource checks one resource's sections, given in start order.
func (r *Result) checkResource(all []Section, name string, idx []int, final string, finalKnown bool) {
	w := &walk{r: r, all: all, name: name, last: -1, lastWriter: -1, lastFenced: -1,
		writer: map[string]int{}, readers: map[string][]int{}}
	for _, i := range idx {
		w.order(i)
		w.write(i)
	}
	if !finalKnown {
		final = w.expect
	} else if final != w.expect {
		d := fmt.Sprintf("register ends with %q, want the last write %q", final, w.expect)
		if j, ok := w.writer[final]; ok {
			d += " (it holds the write of " + all[j].Holder + ")"
		}
		r.add(Violation{Kind: FinalMismatch, Resource: name, First: w.lastWriter, Second: -1, Detail: d})
	}
	w.lostAndDuplicated(idx, final)
}

// walk is checkResource's state while it goes through one resource's
// sections in start order.
type walk struct {
	r          *Result
	all        []Section
	name       string
	last       int    // the section with the latest end so far
	lastWriter int    // the last section that wrote
	lastFenced int    // the last section with a fence
	expect     string // the register's value if every section excluded the others
	writer     map[string]int
	readers    map[string][]int // value -> writing sections that read it
}

// order checks section i against those before it: overlap, stale read and
// fence order.
func (w *walk) order(i int) {
	s, all := w.all[i], w.all
	if w.last >= 0 && s.Start < all[w.last].End {
		w.r.add(Violation{Kind: Overlap, Resource: w.name, First: w.last, Second: i,
			Detail: fmt.Sprintf("%s began %v before %s ended", s.Holder, time.Duration(all[w.last].End-s.Start), all[w.last].Holder)})
	}
	if w.last < 0 || s.End > all[w.last].End {
		w.last = i
	}
	if s.Read != w.expect {
		d := fmt.Sprintf("%s read %q, want %q", s.Holder, s.Read, w.expect)
		if w.lastWriter >= 0 {
			d += " written by " + all[w.lastWriter].Holder
		}
		w.r.add(Violation{Kind: StaleRead, Resource: w.name, First: w.lastWriter, Second: i, Detail: d})
	}
	if s.Fence != 0 {
		if w.lastFenced >= 0 && s.Fence <= all[w.lastFenced].Fence {
			w.r.add(Violation{Kind: FenceInversion, Resource: w.name, First: w.lastFenced, Second: i,
				Detail: fmt.Sprintf("fence %d of %s after fence %d of %s", s.Fence, s.Holder, all[w.lastFenced].Fence, all[w.lastFenced].Holder)})
		}
		w.lastFenced = i
	}
}

// write records section i's write, if it made one.
func (w *walk) write(i int) {
	s := w.all[i]
	if s.Aborted() {
		return
	}
	if j, dup := w.writer[s.Wrote]; dup {
		w.r.add(Violation{Kind: Malformed, Resource: w.name, First: j, Second: i,
			Detail: fmt.Sprintf("value %q written twice: written values must be unique", s.Wrote)})
		return
	}
	w.writer[s.Wrote] = i
	w.readers[s.Read] = append(w.readers[s.Read], i)
	w.expect, w.lastWriter = s.Wrote, i
}

// lostAndDuplicated finds lost updates and duplicates, in start order of
// the sections involved.
func (w *walk) lostAndDuplicated(idx []int, final string) {
	for _, i := range idx {
		s := w.all[i]
		if s.Aborted() || w.writer[s.Wrote] != i {
			continue
		}
		if len(w.readers[s.Wrote]) == 0 && s.Wrote != final {
			w.r.add(Violation{Kind: LostUpdate, Resource: w.name, First: i, Second: -1,
				Detail: fmt.Sprintf("%q written by %s was never read and is not the final value", s.Wrote, s.Holder)})
		}
		if rs := w.readers[s.Read]; len(rs) > 1 && rs[0] != i {
			w.r.add(Violation{Kind: Duplicate, Resource: w.name, First: rs[0], Second: i,
				Detail: fmt.Sprintf("%s and %s both updated from %s", w.all[rs[0]].Holder, s.Holder, quoteValue(s.Read))})
		}
	}
}

func quoteValue(v string) string {
	if v == "" {
		return "the initial (empty) value"
	}
	return strconv.Quote(v)
}
