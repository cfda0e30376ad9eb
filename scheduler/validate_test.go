package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
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
		mention  string
	}{
		{"invalid spec", func() error { return s.Register("a", "not a spec", nop) }, `"not a spec"`},
		{"never activates", func() error { return s.Register("a", "0 0 0 30 2 *", nop) }, "never activates"},
		{"empty name", func() error { return s.Register("", "* * * * * *", nop) }, "empty"},
		{"name with space", func() error { return s.Register("a b", "* * * * * *", nop) }, "whitespace"},
		{"name with brace", func() error { return s.Register("a{b}", "* * * * * *", nop) }, "'{'"},
		{"name too long", func() error { return s.Register(strings.Repeat("x", 201), "* * * * * *", nop) }, "longer"},
		{"duplicate name", func() error { return s.Register("taken", "*/5 * * * * *", nop) }, `"taken"`},
		{"duplicate task name", func() error { return s.RegisterTask("taken", "*/5 * * * * *", enq, task) }, `"taken"`},
		{"nil function", func() error { return s.Register("a", "* * * * * *", nil) }, "nil function"},
		{"zero skew", func() error { return s.Register("a", "* * * * * *", nop, WithSkew(0)) }, "skew"},
		{"negative ttl", func() error { return s.Register("a", "* * * * * *", nop, WithTTL(-time.Second)) }, "ttl"},
		{"negative max delay", func() error { return s.Register("a", "* * * * * *", nop, WithDelayIfRunning(-1)) }, "max delay"},
		{"nil location", func() error { return s.Register("a", "* * * * * *", nop, WithLocation(nil)) }, "location"},
		{"negative catch-up", func() error { return s.Register("a", "* * * * * *", nop, WithCatchUp(-1)) }, "catch-up"},
		{"nil clock", func() error { return s.Register("a", "* * * * * *", nop, withClock(nil)) }, "clock"},
		{"empty replica", func() error { return s.Register("a", "* * * * * *", nop, withReplica("")) }, "replica"},
		{"nil option", func() error { return s.Register("a", "* * * * * *", nop, nil) }, "nil option"},
		{"spec option", func() error { return s.Register("a", "* * * * * *", nop, WithSpec("* * * * * *")) }, "Singleton"},
		{"nil enqueuer", func() error { return s.RegisterTask("a", "* * * * * *", nil, task) }, "enqueuer"},
		{"nil task", func() error { return s.RegisterTask("a", "* * * * * *", enq, nil) }, "nil task"},
		{"task without type", func() error { return s.RegisterTask("a", "* * * * * *", enq, asynq.NewTask(" ", nil)) }, "empty type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.register()
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Fatalf("got %v, want redlock.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
	if got := s.Entries(); len(got) != 1 || got[0].Job != "taken" {
		t.Fatalf("failed registrations left jobs behind: %v", got)
	}
	// Per-second schedules work with the default skew, and with more; a
	// nil logger is the default logger.
	for i, skew := range []time.Duration{defaultSkew, 3 * time.Second} {
		if err := s.Register(fmt.Sprint("ok", i), "* * * * * *", nop, WithSkew(skew), WithLogger(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Register("ok", "@every 1s", nop); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterTask("task", "* * * * *", enq, task); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = s.Register("late", "* * * * * *", nop, WithSkew(500*time.Millisecond))
	if !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("Register after Stop: %v, want redlock.ErrInvalid", err)
	}
}

func TestNewValidation(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("New(nil) = %v, want redlock.ErrInvalid", err)
	}
	v := mustPanic(t, func() { Singleton(nil, "a", WithSpec("* * * * *")) })
	if err, _ := v.(error); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("Singleton(nil) panics with %v, want redlock.ErrInvalid", err)
	}
	locks := newMemLocks().client()
	if _, err := newScheduler(locks, []Option{WithSkew(-1)}); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("negative default skew: %v", err)
	}
	_, err := newScheduler(locks, []Option{withSchedule(Every(time.Minute))})
	if !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("WithSchedule on a Scheduler: %v", err)
	}
	for _, tt := range []struct {
		name    string
		opts    []Option
		mention string
	}{
		{"", nil, "empty"},
		{"a", []Option{WithSpec("bad")}, `"bad"`},
		{"a", []Option{WithSpec("@every 5s")}, "scheduler.Every"},
		{"a", []Option{withSchedule(cron.Every(5 * time.Second))}, "@every"},
		{"a", []Option{WithSpec("0 0 30 2 *")}, "never activates"},
		{"a", []Option{WithTTL(0)}, "ttl"},
		{"a", []Option{WithCatchUp(time.Minute)}, "Scheduler"},
		{"a", []Option{nil}, "nil option"},
	} {
		_, err := newSingleton(locks, tt.name, append(tt.opts, quiet))
		if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("newSingleton(%q): %v, want redlock.ErrInvalid mentioning %q", tt.name, err, tt.mention)
		}
	}
	// The robfig idiom: no schedule, default skew, per-second or
	// aligned-interval schedules.
	for _, opts := range [][]Option{nil, {WithSpec("* * * * * *")}, {withSchedule(Every(time.Second))}} {
		if _, err := newSingleton(locks, "a", append(opts, quiet)); err != nil {
			t.Errorf("newSingleton with %d options: %v", len(opts), err)
		}
	}
}

// mustPanic returns what f panicked with.
func mustPanic(t *testing.T, f func()) (v any) {
	t.Helper()
	defer func() { v = recover() }()
	f()
	t.Fatal("no panic")
	return nil
}

// capture is a slog handler that keeps the records it gets.
type capture struct{ recs chan slog.Record }

func (c capture) Enabled(context.Context, slog.Level) bool      { return true }
func (c capture) Handle(_ context.Context, r slog.Record) error { c.recs <- r; return nil }
func (c capture) WithAttrs([]slog.Attr) slog.Handler            { return c }
func (c capture) WithGroup(string) slog.Handler                 { return c }

// Singleton refuses input that cannot work with a panic that says what is
// wrong, where it is made: never a wrapper whose job silently never runs.
func TestSingletonPanicsOnBadInput(t *testing.T) {
	for _, tt := range []struct {
		what    string
		client  *redlock.Client
		name    string
		opts    []Option
		mention string
	}{
		{"nil client", nil, "report", nil, "nil redlock client"},
		{"@every spec", &redlock.Client{}, "report", []Option{WithSpec("@every 5s")}, "scheduler.Every"},
		{"bad spec", &redlock.Client{}, "report", []Option{WithSpec("bad")}, `"bad"`},
		{"bad name", &redlock.Client{}, "a b", nil, "whitespace"},
		{"catch-up", &redlock.Client{}, "a", []Option{WithCatchUp(time.Hour)}, "Scheduler"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			v := mustPanic(t, func() { Singleton(tt.client, tt.name, tt.opts...) })
			err, ok := v.(error)
			if !ok || !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("panic %v, want redlock.ErrInvalid mentioning %q", v, tt.mention)
			}
			if !strings.HasPrefix(err.Error(), "scheduler: ") {
				t.Fatalf("panic %q, want the package's error", err)
			}
		})
	}
}

func TestOutcomeNames(t *testing.T) {
	seen := map[Outcome]bool{}
	for _, o := range []Outcome{OutcomeRan, OutcomeFailed, OutcomeSkippedOtherReplica, OutcomeSkippedOverlap,
		OutcomeSkippedBeyondSkew, OutcomeLockError, OutcomeLate, OutcomeClock} {
		if o == "" || seen[o] || strings.ContainsAny(string(o), " -") {
			t.Fatalf("outcome %q is not a distinct metric label", o)
		}
		seen[o] = true
	}
}
