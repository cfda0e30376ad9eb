package checker

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Evidence file names written by WriteEvidence.
const (
	HistoryFile    = "history.json"
	ViolationsFile = "violations.txt"
	TimelineFile   = "timeline.svg"
)

// evidence is the content of HistoryFile.
type evidence struct {
	Result  Result  `json:"result"`
	History History `json:"history"`
}

// WriteEvidence stores h and r under dir (created if needed): HistoryFile
// (both as JSON, enough to replay Check), ViolationsFile (each finding with
// the sections involved) and TimelineFile (the sections per resource on one
// time axis, overlapping ones in red, events as vertical lines). It returns
// dir.
func WriteEvidence(dir string, h History, r Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(evidence{Result: r, History: h}, "", " ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, HistoryFile), b, 0o644); err != nil {
		return "", err
	}
	for name, write := range map[string]func(io.Writer, History, Result) error{
		ViolationsFile: writeViolations,
		TimelineFile:   writeTimeline,
	} {
		if err := writeFile(filepath.Join(dir, name), func(w io.Writer) error { return write(w, h, r) }); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ReadEvidence reads back a history and result stored by WriteEvidence.
func ReadEvidence(dir string) (History, Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, HistoryFile))
	if err != nil {
		return History{}, Result{}, err
	}
	var e evidence
	if err := json.Unmarshal(b, &e); err != nil {
		return History{}, Result{}, fmt.Errorf("%s: %w", HistoryFile, err)
	}
	return e.History, e.Result, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// origin is the time every offset in the evidence is counted from.
func origin(h History) int64 {
	if len(h.Sections) == 0 {
		return 0
	}
	o := int64(math.MaxInt64)
	for _, s := range h.Sections {
		o = min(o, s.Start)
	}
	for _, e := range h.Events {
		o = min(o, e.At)
	}
	return o
}

func writeViolations(w io.Writer, h History, r Result) error {
	t0 := origin(h)
	at := func(ns int64) string { return fmt.Sprintf("+%v", time.Duration(ns-t0).Round(time.Microsecond)) }
	section := func(i int) string {
		if i < 0 || i >= len(h.Sections) {
			return "-"
		}
		s := h.Sections[i]
		out := fmt.Sprintf("#%d %s [%s, %s] read %q wrote %q", i, s.Holder, at(s.Start), at(s.End), s.Read, s.Wrote)
		if s.Fence != 0 {
			out += fmt.Sprintf(" fence %d", s.Fence)
		}
		if s.Note != "" {
			out += " (" + s.Note + ")"
		}
		return out
	}
	fmt.Fprintf(w, "%s\ntimes are offsets from the earliest record\n\n", r)
	for _, e := range h.Events {
		fmt.Fprintf(w, "event %s: %s\n", at(e.At), e.What)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "\n%s on %q: %s\n  first:  %s\n  second: %s\n", v.Kind, v.Resource, v.Detail, section(v.First), section(v.Second))
	}
	return nil
}

// Timeline geometry, in SVG user units.
const (
	svgWidth  = 1600.0
	svgLeft   = 120.0
	svgLane   = 14.0
	svgHeader = 30.0
)

// placed is a section's lane within its resource's block.
type placed struct{ i, lane int }

// block is one resource's lanes on the timeline.
type block struct {
	name   string
	top    float64
	placed []placed
}

func writeTimeline(w io.Writer, h History, r Result) error {
	bad := map[int]bool{}
	for _, v := range r.Violations {
		if v.Kind == Overlap || v.Kind == StaleRead {
			bad[v.First], bad[v.Second] = true, true
		}
	}
	t0 := origin(h)
	t1 := t0 + 1
	for _, s := range h.Sections {
		t1 = max(t1, s.End)
	}
	scale := (svgWidth - svgLeft - 10) / float64(t1-t0)
	x := func(ns int64) float64 { return svgLeft + float64(ns-t0)*scale }
	blocks, height := layout(h)

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="monospace" font-size="11">`+"\n", svgWidth, height)
	fmt.Fprintf(w, `<text x="4" y="14">%s; %v from the earliest record; red: overlapping or stale</text>`+"\n",
		html.EscapeString(r.String()), time.Duration(t1-t0).Round(time.Millisecond))
	for _, b := range blocks {
		fmt.Fprintf(w, `<text x="4" y="%.1f">%s</text>`+"\n", b.top+11, html.EscapeString(b.name))
		for _, p := range b.placed {
			s := h.Sections[p.i]
			fill := "#4a7"
			if bad[p.i] {
				fill = "#d22"
			} else if s.Aborted() {
				fill = "#bbb"
			}
			fmt.Fprintf(w, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>#%d %s read %q wrote %q fence %d %s</title></rect>`+"\n",
				x(s.Start), b.top+float64(p.lane)*svgLane, max(x(s.End)-x(s.Start), 0.5), svgLane-2, fill,
				p.i, html.EscapeString(s.Holder), html.EscapeString(s.Read), html.EscapeString(s.Wrote), s.Fence, html.EscapeString(s.Note))
		}
	}
	for _, e := range h.Events {
		fmt.Fprintf(w, `<line x1="%.2f" y1="18" x2="%.2f" y2="%.0f" stroke="#36c" stroke-dasharray="4 3"/><text x="%.2f" y="26" fill="#36c">%s</text>`+"\n",
			x(e.At), x(e.At), height, x(e.At)+2, html.EscapeString(e.What))
	}
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}

// layout gives each resource a block of lanes, in name order; sections that
// overlap go to extra lanes, first fit. It returns the blocks and the
// timeline's height.
func layout(h History) ([]block, float64) {
	byRes := map[string][]int{}
	for i, s := range h.Sections {
		byRes[s.Resource] = append(byRes[s.Resource], i)
	}
	names := make([]string, 0, len(byRes))
	for n := range byRes {
		names = append(names, n)
	}
	slices.Sort(names)
	var blocks []block
	y := svgHeader
	for _, n := range names {
		idx := byRes[n]
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(h.Sections[a].Start, h.Sections[b].Start) })
		var laneEnd []int64
		var ps []placed
		for _, i := range idx {
			lane := slices.IndexFunc(laneEnd, func(end int64) bool { return end <= h.Sections[i].Start })
			if lane < 0 {
				lane = len(laneEnd)
				laneEnd = append(laneEnd, 0)
			}
			laneEnd[lane] = h.Sections[i].End
			ps = append(ps, placed{i, lane})
		}
		blocks = append(blocks, block{n, y, ps})
		y += float64(max(len(laneEnd), 1))*svgLane + 10
	}
	return blocks, y + 10
}
