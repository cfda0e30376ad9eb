package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracingExample runs the example: every run of a task is a trace
// rooted at asynq.task with the task's attributes; every task's last run
// got its lock (an acquisition that won, under the task's span or its
// wait), ran the handler's span and released the lock, all in the task's
// trace; a run that was parked says so in an event and ends as a conflict.
func TestTracingExample(t *testing.T) {
	spans, err := run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := newForest(spans)
	last := map[string]tracetest.SpanStub{}
	for _, r := range f.roots {
		if r.Name != "asynq.task" {
			t.Fatalf("a trace rooted at %s, want asynq.task", r.Name)
		}
		a := attrMap(r)
		for _, k := range []string{"asynq.task.type", "asynq.task.id", "asynq.queue", "asynq.task.retry_count", "messaging.system"} {
			if a[k] == "" {
				t.Errorf("task span lacks %s: %v", k, r.Attributes)
			}
		}
		if hasEvent(r, "asynqlock.parked") && a["asynq.task.outcome"] != "conflict" {
			t.Errorf("a parked run ended %q", a["asynq.task.outcome"])
		}
		last[taskID(r)] = r
	}
	if len(last) != hotTasks {
		t.Fatalf("runs of %d tasks, want %d", len(last), hotTasks)
	}
	for id, r := range last {
		names := map[string]int{}
		f.walk(r, func(s tracetest.SpanStub) {
			if s.SpanContext.TraceID() != r.SpanContext.TraceID() {
				t.Errorf("task %s: span %s in another trace", id, s.Name)
			}
			if s.Name == "asynqlock.acquire" && attrMap(s)["asynqlock.outcome"] == "acquired" {
				names["won"]++
			}
			names[s.Name]++
		})
		if attrMap(r)["asynq.task.outcome"] != "ok" || names["won"] != 1 || names["stock.update"] != 1 || names["asynqlock.release"] != 1 {
			t.Errorf("task %s's last run: %v (outcome %s)", id, names, attrMap(r)["asynq.task.outcome"])
		}
	}
	readmeQuotesThis(t, spans)
	var out bytes.Buffer
	printRuns(&out, spans, true)
	if n := strings.Count(out.String(), "\nasynq.task "); n != len(f.roots) || !strings.Contains(out.String(), "└─ asynqlock.release") {
		t.Errorf("%d trees printed for %d runs:\n%s", n, len(f.roots), out.String())
	}
}

// walk calls fn for every descendant of s.
func (f forest) walk(s tracetest.SpanStub, fn func(tracetest.SpanStub)) {
	for _, k := range f.children[s.SpanContext.SpanID()] {
		fn(k)
		f.walk(k, fn)
	}
}

func attrMap(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// sometimes are the spans and events a run records or not, by its timing:
// whether a task waits in a worker or is parked.
var sometimes = map[string]bool{"asynqlock.wait": true, "asynqlock.parked": true}

// readmeQuotesThis checks the README's Tracing section against the spans
// of a run: its block quoted after the command is this program's output (a
// header, then tree lines), and every span name, event name and attribute
// key it shows is one the program records.
func readmeQuotesThis(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## Tracing\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	m := regexp.MustCompile("(?s)`go run ./examples/tracing`.*?```text\n(.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("README's Tracing section quotes no output after `go run ./examples/tracing`")
	}
	known := map[string]bool{}
	for _, s := range spans {
		known[s.Name] = true
		for _, kv := range s.Attributes {
			known[string(kv.Key)] = true
		}
		for _, ev := range s.Events {
			known[ev.Name] = true
			for _, kv := range ev.Attributes {
				known[string(kv.Key)] = true
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(m[1]), "\n")
	if !regexp.MustCompile(`^\d+ runs of \d+ tasks; the runs of task [0-9a-f-]+:$`).MatchString(lines[0]) {
		t.Errorf("README's first line is not the program's header: %q", lines[0])
	}
	span := regexp.MustCompile(`^[│├└─ ]*(· event )?([\w.]+) (at \+)?\d+\.\d\dms`)
	key := regexp.MustCompile(` ([\w.]+)=`)
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		sm := span.FindStringSubmatch(l)
		if sm == nil {
			t.Errorf("README line is no span or event line of this program: %q", l)
			continue
		}
		if !known[sm[2]] && sometimes[sm[2]] {
			t.Logf("this run recorded no %s (it depends on the run's timing): its README line is not checked", sm[2])
			continue
		}
		if !known[sm[2]] {
			t.Errorf("README shows %s, which this program does not record", sm[2])
			continue
		}
		for _, k := range key.FindAllStringSubmatch(l, -1) {
			if !known[k[1]] {
				t.Errorf("README shows attribute %s, which this program does not record", k[1])
			}
		}
	}
}
