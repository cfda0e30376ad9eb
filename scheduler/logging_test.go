package scheduler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// logLines is a log as an operator reads it: one text line per record.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// at returns the lines at level (DEBUG, INFO, WARN, ERROR; "" for any)
// that contain msg.
func (l *logLines) at(level, msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, "level="+level) && strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// infoLogger logs lines at Info and above to l, as an operator runs it.
func (l *logLines) infoLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// A per-second job fails for three ticks, runs for six, fails for three
// again: the log says so in three lines (Error when it starts failing, Info
// when it is back, at the first run the settle time after the last failure,
// Error again), nothing per tick, while the observer gets every run. The
// second failing period is the control: a repeat after a change of state is
// logged again, so the count can exceed one per state. Before, every run
// logged a line (Info for each success, Error for each failure: twelve lines).
func TestLogOncePerChangeOfState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logLines{}
		rec := &recorder{}
		var n atomic.Int32
		job := func(context.Context) error {
			if k := n.Add(1); k <= 3 || k > 9 {
				return errors.New("disk full")
			}
			return nil
		}
		s := newTestScheduler(t, newMemLocks().client(), WithSkew(300*time.Millisecond),
			WithLogger(logs.infoLogger()), WithObserver(rec.observe))
		if err := s.Register("flaky", "* * * * * *", job); err != nil {
			t.Fatal(err)
		}
		s.Start()
		time.Sleep(12500 * time.Millisecond)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := rec.count(OutcomeFailed) + rec.count(OutcomeRan); got != 12 {
			t.Fatalf("observer saw %d runs, want all 12", got)
		}
		failed, back := logs.at("ERROR", `msg="cron job failed"`), logs.at("INFO", `msg="cron job back to normal"`)
		if len(failed) != 2 || len(back) != 1 {
			t.Fatalf("want 2 failure lines and 1 back-to-normal line, got %d and %d:\n%s", len(failed), len(back), logs.buf.String())
		}
		if !strings.Contains(back[0], `after="cron job failed"`) || !strings.Contains(back[0], "repeats=2") {
			t.Fatalf("back-to-normal line does not say what ended: %s", back[0])
		}
		if info := logs.at("INFO", ""); len(info) != 1 {
			t.Fatalf("%d Info lines, want only the change of state:\n%s", len(info), strings.Join(info, "\n"))
		}
		time.Sleep(3 * time.Second) // the tick records expire
	})
}

// Two replicas of a job that always overruns its interval: each warns of
// the skipped ticks once, and nothing is logged at Info (runs and ticks
// the other replica took are Debug). Before, each skip was a Warn and each
// run an Info.
func TestLogNothingPerTickWhileHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs, rec := &logLines{}, &recorder{}
		locks := newMemLocks()
		long := func(ctx context.Context) error { time.Sleep(3500 * time.Millisecond); return nil }
		opts := []Option{WithSkew(300 * time.Millisecond), WithLogger(logs.infoLogger()), WithObserver(rec.observe)}
		a, b := newTestScheduler(t, locks.client(), opts...), newTestScheduler(t, locks.client(), opts...)
		for _, s := range []*Scheduler{a, b} {
			if err := s.Register("long", "* * * * * *", long); err != nil {
				t.Fatal(err)
			}
			s.Start()
		}
		time.Sleep(8500 * time.Millisecond)
		for _, s := range []*Scheduler{a, b} {
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// At Info only a change of state: a replica that skipped and then
		// won a tick logs "back to normal" once (which replica wins which
		// tick depends on scheduling).
		back := logs.at("INFO", "cron job back to normal")
		if lines := logs.at("INFO", ""); len(lines) != len(back) {
			t.Fatalf("%d Info lines while the job overran throughout:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		// Warnings come per change of state, not per skip: the control is
		// the count of skips the observer got, which a warning per skip
		// would have matched.
		warns := logs.at("WARN", "skipped_overlap")
		if skips := rec.count(OutcomeSkippedOverlap); len(warns) == 0 || len(warns) >= skips || len(back) > len(warns) {
			t.Fatalf("%d overlap warnings and %d recoveries for %d skips, want a warning per change of state:\n%s", len(warns), len(back), skips, logs.buf.String())
		}
		time.Sleep(5 * time.Second)
	})
}

// With no WithLogger the scheduler logs to slog.Default(), as redlock and
// the middleware do: a failing job's error reaches it once (nothing fails
// silently), a healthy job writes nothing there at Info. The control gives
// a discarding logger and sees nothing.
func TestDefaultLoggerShowsFailuresOnly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []Option
		fail      bool
		want, all int
	}{
		{name: "failing", fail: true, want: 1, all: 1},
		{name: "healthy", all: 0},
		{name: "control-discard", opts: []Option{WithLogger(slog.New(slog.DiscardHandler))}, fail: true, all: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logLines{}
			prev := slog.Default()
			slog.SetDefault(logs.infoLogger())
			t.Cleanup(func() { slog.SetDefault(prev) })
			synctest.Test(t, func(t *testing.T) {
				s, err := newScheduler(newMemLocks().client(), append(tc.opts, WithSkew(300*time.Millisecond)))
				if err != nil {
					t.Fatal(err)
				}
				job := func(context.Context) error { return nil }
				if tc.fail {
					job = func(context.Context) error { return errors.New("disk full") }
				}
				if err := s.Register("job", "* * * * * *", job); err != nil {
					t.Fatal(err)
				}
				s.Start()
				time.Sleep(3500 * time.Millisecond)
				if err := s.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * time.Second)
			})
			if got := len(logs.at("ERROR", "disk full")); got != tc.want {
				t.Fatalf("%d error lines on slog.Default(), want %d:\n%s", got, tc.want, logs.buf.String())
			}
			if got := len(logs.at("", "")); got != tc.all {
				t.Fatalf("%d lines on slog.Default(), want %d:\n%s", got, tc.all, logs.buf.String())
			}
		})
	}
}
