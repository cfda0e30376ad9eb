package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// forest is the recorded spans as trees: one root per run of a task (the
// span asynq.task), children by parent, each list in the order started.
type forest struct {
	roots    []tracetest.SpanStub
	children map[trace.SpanID][]tracetest.SpanStub
}

func newForest(spans tracetest.SpanStubs) forest {
	f := forest{children: map[trace.SpanID][]tracetest.SpanStub{}}
	for _, s := range spans {
		if s.Parent.IsValid() {
			f.children[s.Parent.SpanID()] = append(f.children[s.Parent.SpanID()], s)
		} else {
			f.roots = append(f.roots, s)
		}
	}
	byStart(f.roots)
	for _, kids := range f.children {
		byStart(kids)
	}
	return f
}

func byStart(s []tracetest.SpanStub) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].StartTime.Before(s[j].StartTime) })
}

// taskID is the task a run's root span is of.
func taskID(root tracetest.SpanStub) string {
	for _, kv := range root.Attributes {
		if kv.Key == "asynq.task.id" {
			return kv.Value.AsString()
		}
	}
	return ""
}

// showcase picks the task to show: the first one parked, else the one
// that waited longest for its lock.
func (f forest) showcase() string {
	best, longest := "", time.Duration(-1)
	for _, r := range f.roots {
		if hasEvent(r, "asynqlock.parked") {
			return taskID(r)
		}
		for _, k := range f.children[r.SpanContext.SpanID()] {
			if d := k.EndTime.Sub(k.StartTime); k.Name == "asynqlock.wait" && d > longest {
				best, longest = taskID(r), d
			}
		}
	}
	if best == "" && len(f.roots) > 0 {
		best = taskID(f.roots[0])
	}
	return best
}

func hasEvent(s tracetest.SpanStub, name string) bool {
	for _, ev := range s.Events {
		if ev.Name == name {
			return true
		}
	}
	return false
}

// printRuns prints the span trees of the showcase task's runs, or of every
// run (all), each with its duration and attributes, each event with its
// time from its span's start.
func printRuns(out io.Writer, spans tracetest.SpanStubs, all bool) {
	f := newForest(spans)
	tasks := map[string]bool{}
	for _, r := range f.roots {
		tasks[taskID(r)] = true
	}
	show := f.showcase()
	if all {
		fmt.Fprintf(out, "%d runs of %d tasks:\n", len(f.roots), len(tasks))
	} else {
		fmt.Fprintf(out, "%d runs of %d tasks; the runs of task %s:\n", len(f.roots), len(tasks), show)
	}
	for _, r := range f.roots {
		if all || taskID(r) == show {
			fmt.Fprintln(out)
			printSpan(out, r, f.children, "", "")
		}
	}
}

// printSpan prints s on a line of its own after prefix, its events and its
// children below it after childPrefix.
func printSpan(out io.Writer, s tracetest.SpanStub, children map[trace.SpanID][]tracetest.SpanStub, prefix, childPrefix string) {
	status := ""
	if s.Status.Code == codes.Error {
		status = " [error: " + s.Status.Description + "]"
	}
	fmt.Fprintf(out, "%s%s %s%s%s\n", prefix, s.Name, ms(s.EndTime.Sub(s.StartTime)), status, attrs(s.Attributes))
	kids := children[s.SpanContext.SpanID()]
	bar := "   "
	if len(kids) > 0 {
		bar = "│  "
	}
	for _, ev := range s.Events {
		fmt.Fprintf(out, "%s%s· event %s at +%s%s\n", childPrefix, bar, ev.Name, ms(ev.Time.Sub(s.StartTime)), attrs(ev.Attributes))
	}
	for i, k := range kids {
		if i == len(kids)-1 {
			printSpan(out, k, children, childPrefix+"└─ ", childPrefix+"   ")
		} else {
			printSpan(out, k, children, childPrefix+"├─ ", childPrefix+"│  ")
		}
	}
}

// ms writes d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// attrs writes attributes as " key=value ...", in the order recorded.
func attrs(kvs []attribute.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
	}
	return b.String()
}
