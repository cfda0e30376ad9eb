package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

func nop(context.Context) error { return nil }

func TestRegisterValidation(t *testing.T) {
	s, err := newScheduler(newMemLocks().client(), []Option{quiet, WithSkew(500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register("taken", "* * * * * *", nop); err != nil {
		t.Fatal(err)
	}
	enq := &fakeQueue{}
	task := asynq.NewTask("report", nil)
	tests := []struct {
		name     string
		register func() error
		want     error
		mention  string
	}{
		{"invalid spec", func() error { return s.Register("a", "not a spec", nop) }, ErrInvalidSpec, `"not a spec"`},
		{"never activates", func() error { return s.Register("a", "0 0 0 30 2 *", nop) }, ErrInvalidSpec, "never activates"},
		{"empty name", func() error { return s.Register("", "* * * * * *", nop) }, ErrInvalidName, "empty"},
		{"name with space", func() error { return s.Register("a b", "* * * * * *", nop) }, ErrInvalidName, "whitespace"},
		{"name with brace", func() error { return s.Register("a{b}", "* * * * * *", nop) }, ErrInvalidName, "'{'"},
		{"name too long", func() error { return s.Register(strings.Repeat("x", 201), "* * * * * *", nop) }, ErrInvalidName, "longer"},
		{"duplicate name", func() error { return s.Register("taken", "*/5 * * * * *", nop) }, ErrDuplicateName, `"taken"`},
		{"duplicate task name", func() error { return s.RegisterTask("taken", "*/5 * * * * *", enq, task) }, ErrDuplicateName, `"taken"`},
		{"skew larger than interval", func() error { return s.Register("a", "* * * * * *", nop, WithSkew(2*time.Second)) }, ErrSkewTooLarge, "smallest interval 1s"},
		{"skew equal to interval", func() error { return s.Register("a", "*/5 * * * * *", nop, WithSkew(5*time.Second)) }, ErrSkewTooLarge, "skew 5s"},
		{"skew larger than smallest gap", func() error { return s.Register("a", "0,2 * * * * *", nop, WithSkew(3*time.Second)) }, ErrSkewTooLarge, "2s"},
		{"skew larger than @every", func() error { return s.Register("a", "@every 1s", nop, WithSkew(time.Second)) }, ErrSkewTooLarge, ""},
		{"nil function", func() error { return s.Register("a", "* * * * * *", nil) }, ErrInvalid, "nil function"},
		{"zero skew", func() error { return s.Register("a", "* * * * * *", nop, WithSkew(0)) }, ErrInvalid, "skew"},
		{"negative ttl", func() error { return s.Register("a", "* * * * * *", nop, WithTTL(-time.Second)) }, ErrInvalid, "ttl"},
		{"bad overlap", func() error { return s.Register("a", "* * * * * *", nop, WithOverlap(Overlap(7))) }, ErrInvalid, "overlap"},
		{"negative max delay", func() error { return s.Register("a", "* * * * * *", nop, WithMaxDelay(-1)) }, ErrInvalid, "max delay"},
		{"nil location", func() error { return s.Register("a", "* * * * * *", nop, WithLocation(nil)) }, ErrInvalid, "location"},
		{"nil logger", func() error { return s.Register("a", "* * * * * *", nop, WithLogger(nil)) }, ErrInvalid, "logger"},
		{"nil option", func() error { return s.Register("a", "* * * * * *", nop, nil) }, ErrInvalid, "nil option"},
		{"spec option", func() error { return s.Register("a", "* * * * * *", nop, WithSpec("* * * * * *")) }, ErrInvalid, "Singleton"},
		{"short retention", func() error {
			return s.RegisterTask("a", "* * * * *", enq, task, WithRetention(500*time.Millisecond))
		}, ErrInvalid, "retention"},
		{"nil enqueuer", func() error { return s.RegisterTask("a", "* * * * * *", nil, task) }, ErrInvalid, "enqueuer"},
		{"nil task", func() error { return s.RegisterTask("a", "* * * * * *", enq, nil) }, ErrInvalid, "nil task"},
		{"task without type", func() error { return s.RegisterTask("a", "* * * * * *", enq, asynq.NewTask(" ", nil)) }, ErrInvalid, "empty type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.register()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
	if got := s.Jobs(); len(got) != 1 || got[0] != "taken" {
		t.Fatalf("failed registrations left jobs behind: %v", got)
	}
	// Just under the interval is fine.
	if err := s.Register("ok", "* * * * * *", nop, WithSkew(999*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterTask("task", "* * * * *", enq, task); err != nil {
		t.Fatal(err)
	}
	if !s.Remove("ok") || s.Remove("ok") {
		t.Fatal("Remove should report whether the job was registered")
	}
	if err := s.Register("ok", "* * * * * *", nop, WithSkew(500*time.Millisecond)); err != nil {
		t.Fatalf("a removed name can be registered again: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Register("late", "* * * * * *", nop, WithSkew(500*time.Millisecond)); !errors.Is(err, ErrStopped) {
		t.Fatalf("Register after Stop: %v, want ErrStopped", err)
	}
}

func TestNewValidation(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New(nil) = %v, want ErrInvalid", err)
	}
	if _, err := NewSingleton(nil, "a", WithSpec("* * * * *")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewSingleton(nil) = %v, want ErrInvalid", err)
	}
	locks := newMemLocks().client()
	if _, err := newScheduler(locks, []Option{WithSkew(-1)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative default skew: %v", err)
	}
	if _, err := newScheduler(locks, []Option{WithSchedule(Every(time.Minute))}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("WithSchedule on a Scheduler: %v", err)
	}
	for _, tt := range []struct {
		name string
		opts []Option
		want error
	}{
		{"", []Option{WithSpec("* * * * *")}, ErrInvalidName},
		{"a", []Option{WithSpec("bad")}, ErrInvalidSpec},
		{"a", []Option{WithSchedule(Every(time.Second))}, ErrSkewTooLarge},
		{"a", []Option{WithSpec("@every 1s")}, ErrSkewTooLarge},
		{"a", []Option{WithSpec("* * * * *"), WithTTL(0)}, ErrInvalid},
	} {
		if _, err := newSingleton(locks, tt.name, append(tt.opts, quiet)); !errors.Is(err, tt.want) {
			t.Errorf("newSingleton(%q): %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := newSingleton(locks, "a", []Option{quiet}); err != nil {
		t.Fatalf("without a schedule NewSingleton accepts (Named jobs bring theirs): %v", err)
	}
}

// capture is a slog handler that keeps the records it gets.
type capture struct{ recs chan slog.Record }

func (c capture) Enabled(context.Context, slog.Level) bool      { return true }
func (c capture) Handle(_ context.Context, r slog.Record) error { c.recs <- r; return nil }
func (c capture) WithAttrs([]slog.Attr) slog.Handler            { return c }
func (c capture) WithGroup(string) slog.Handler                 { return c }

// A misconfigured Singleton logs at once and reports every run, never runs
// the job, and never panics.
func TestMisconfiguredSingletonNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := capture{recs: make(chan slog.Record, 100)}
		rec := &recorder{}
		w := Singleton(nil, "report", WithSpec("* * * * * *"), WithLogger(slog.New(logs)), WithObserver(rec.observe))
		r := <-logs.recs
		if r.Level != slog.LevelError || !strings.Contains(r.Message, "never run") {
			t.Fatalf("want an error log at construction, got %v %q", r.Level, r.Message)
		}
		ran := false
		c := cron.New(cron.WithSeconds())
		if _, err := c.AddJob("* * * * * *", w(cron.FuncJob(func() { ran = true }))); err != nil {
			t.Fatal(err)
		}
		c.Start()
		time.Sleep(2*time.Second + 100*time.Millisecond)
		stopCrons(c)
		if ran {
			t.Fatal("the job of a misconfigured Singleton ran")
		}
		evs := rec.eventsOf(OutcomeMisconfigured)
		if len(evs) != 2 || !errors.Is(evs[0].Err, ErrInvalid) || evs[0].Job != "report" {
			t.Fatalf("want a misconfigured event per activation, got %+v", rec.events)
		}
	})
}

// Without a schedule, a wrapped job that is not Named is misconfigured;
// Named jobs bring their name and schedule (the cron.WithChain case).
func TestSingletonWithChainAndNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		w, err := newSingleton(newMemLocks().client(), "svc", []Option{quiet, WithSkew(300 * time.Millisecond), WithObserver(rec.observe)})
		if err != nil {
			t.Fatal(err)
		}
		c := cron.New(cron.WithChain(w))
		fast, slow := Every(time.Second), Every(2*time.Second)
		c.Schedule(fast, Named("fast", fast, rec.job(0, 0)))
		c.Schedule(slow, Named("slow", slow, rec.job(0, 0)))
		c.Schedule(fast, cron.FuncJob(func() { t.Error("an unnamed job ran without a schedule") }))
		c.Schedule(fast, Named("bad name", fast, rec.job(0, 0)))
		c.Start()
		time.Sleep(4*time.Second + 100*time.Millisecond)
		stopCrons(c)
		byJob := map[string]int{}
		for _, e := range rec.eventsOf(OutcomeRan) {
			byJob[e.Job]++
		}
		if byJob["svc/fast"] != 4 || byJob["svc/slow"] != 2 {
			t.Fatalf("runs per job %v, want svc/fast 4 and svc/slow 2", byJob)
		}
		mis := rec.eventsOf(OutcomeMisconfigured)
		if len(mis) != 8 {
			t.Fatalf("%d misconfigured events, want 4 for each bad job", len(mis))
		}
		var noSched, badName bool
		for _, e := range mis {
			noSched = noSched || errors.Is(e.Err, ErrNoSchedule)
			badName = badName || errors.Is(e.Err, ErrInvalidName)
		}
		if !noSched || !badName {
			t.Fatalf("want ErrNoSchedule and ErrInvalidName, got %+v", mis)
		}
		time.Sleep(2 * time.Second)
	})
}

func TestOutcomeAndOverlapNames(t *testing.T) {
	seen := map[string]bool{}
	for o := OutcomeRan; o <= OutcomeMisconfigured; o++ {
		s := o.String()
		if s == "unknown" || seen[s] {
			t.Fatalf("outcome %d has name %q", o, s)
		}
		seen[s] = true
	}
	if Outcome(0).String() != "unknown" || SkipIfRunning.String() != "skip" || DelayIfRunning.String() != "delay" || Overlap(9).String() != "unknown" {
		t.Fatal("bad names")
	}
}
