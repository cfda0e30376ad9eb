package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

// runOutOfStep runs two replicas of a spec-less Singleton job on schedules
// of 3s made by sched, the second cron started starts after the first, for
// 20s, and returns the job's runs and the log (Debug and above).
func runOutOfStep(t *testing.T, sched cron.Schedule, starts ...time.Duration) (int32, *logLines) {
	t.Helper()
	logs := &logLines{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	locks := newMemLocks()
	var runs atomic.Int32
	job := Func(func(context.Context) error { runs.Add(1); return nil })
	var crons []*cron.Cron
	begin := time.Now()
	for _, at := range starts {
		time.Sleep(time.Until(begin.Add(at)))
		w, err := newSingleton(locks.client(), "report", []Option{WithLogger(logger)})
		if err != nil {
			t.Fatal(err)
		}
		c := cron.New()
		c.Schedule(sched, w(job))
		c.Start()
		crons = append(crons, c)
	}
	time.Sleep(time.Until(begin.Add(20 * time.Second)))
	stopCrons(crons...)
	time.Sleep(10 * time.Second) // the records expire
	return runs.Load(), logs
}

const outOfStep = "out of step"

// robfig's @every under Singleton, two replicas started 1.5s apart: each
// runs its own ticks, so the job runs about twice per interval. The
// replicas find out and warn once each at most, while the mismatch is
// seen again at later ticks (at Debug): the "once" can fail. Before, nothing
// was said.
func TestRobfigEveryOutOfStepWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runs, logs := runOutOfStep(t, cron.Every(3*time.Second), 200*time.Millisecond, 1700*time.Millisecond)
		if runs < 10 {
			t.Fatalf("%d runs in 20s: the replicas were meant to run out of step", runs)
		}
		warns, repeats := logs.at("WARN", outOfStep), logs.at("DEBUG", outOfStep)
		if len(warns) == 0 || len(warns) > 2 || len(repeats) == 0 {
			t.Fatalf("%d warnings and %d repeats of the mismatch, want 1-2 (once per replica) and some:\n%s",
				len(warns), len(repeats), logs.buf.String())
		}
		t.Logf("%d runs, %d warnings, %d repeats", runs, len(warns), len(repeats))
		if !strings.Contains(warns[0], "scheduler.Every") || !strings.Contains(warns[0], "interval=3s") {
			t.Fatalf("warning does not say what to do: %s", warns[0])
		}
	})
}

// Replicas in step say nothing: Every(3s) on both (the fix the warning
// gives), and robfig's @every on crons started within the same second.
func TestInStepSaysNothing(t *testing.T) {
	for name, sched := range map[string]cron.Schedule{"Every": Every(3 * time.Second), "robfig": cron.Every(3 * time.Second)} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				runs, logs := runOutOfStep(t, sched, 200*time.Millisecond, 700*time.Millisecond)
				if runs < 5 || runs > 7 {
					t.Fatalf("%d runs in 20s, want one per 3s", runs)
				}
				if lines := logs.at("", outOfStep); len(lines) != 0 {
					t.Fatalf("replicas in step reported out of step:\n%s", strings.Join(lines, "\n"))
				}
			})
		})
	}
}

// With a redlock client, a mark carries its note in the lock's holder, and
// a second mark of the resource reads it back; a mark is left to expire
// without a loss.
func TestRedlockMarkReadsTheNote(t *testing.T) {
	v := &opsView{}
	locks, _ := opsClient(t, v)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := redlockLocker{locks}
	if note, err := l.Mark(ctx, "cron:x:phase", 2*time.Second, "tick 3000 every 3000"); err != nil || note != "" {
		t.Fatalf("first mark: %q, %v", note, err)
	}
	note, err := l.Mark(ctx, "cron:x:phase", 2*time.Second, "tick 4000 every 3000")
	if !errors.Is(err, redlock.ErrLocked) || note != "tick 3000 every 3000" {
		t.Fatalf("second mark: %q, %v; want the first one's note and ErrLocked", note, err)
	}
	waitRecordsGone(t, locks, "cron:x:")
	if lines, events := v.lossesOf("cron:x:"); lines != 0 || events != 0 {
		t.Fatalf("the mark was reported lost: %d lines, %d events", lines, events)
	}
}
