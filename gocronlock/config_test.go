package gocronlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/cronsim"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
)

// offlineLocks is a client on one node, which these tests never reach.
func offlineLocks(t *testing.T) *redlock.Client {
	t.Helper()
	return newLocks(t, redistest.StartCluster(t, 1))
}

// TestNewRefusesBadConfig: a configuration that cannot work is refused by
// New with redlock.ErrInvalid and a message naming what is wrong.
func TestNewRefusesBadConfig(t *testing.T) {
	locks := offlineLocks(t)
	job := map[string]string{"j": "@every 1s"}
	for _, tc := range []struct {
		name  string
		locks *redlock.Client
		jobs  map[string]string
		opts  []scheduler.Option
		want  string
	}{
		{"nil client", nil, job, nil, "nil redlock client"},
		{"no job", locks, nil, nil, "no job"},
		{"nil option", locks, job, []scheduler.Option{nil}, "nil option"},
		{"empty name", locks, map[string]string{"": "@every 1s"}, nil, "empty job name"},
		{"sub-ms interval", locks, map[string]string{"j": "@every 500us"}, nil, "whole number of milliseconds"},
		{"fractional interval", locks, map[string]string{"j": "@every 1500us"}, nil, "whole number of milliseconds"},
		{"bad spec", locks, map[string]string{"j": "61 * * * *"}, nil, `cron spec "61 * * * *"`},
		{"never", locks, map[string]string{"j": "0 0 30 2 *"}, nil, "never activates"},
		{"skew", locks, job, []scheduler.Option{scheduler.WithSkew(0)}, "skew must be positive"},
		{"ttl", locks, job, []scheduler.Option{scheduler.WithTTL(-time.Second)}, "ttl must be positive"},
		{"location", locks, job, []scheduler.Option{scheduler.WithLocation(nil)}, "nil location"},
		{"clock", locks, job, []scheduler.Option{cronsim.WithClock[scheduler.Option](nil)}, "nil clock"},
		{"spec", locks, job, []scheduler.Option{scheduler.WithSpec("* * * * *")}, "not for NewJobs"},
	} {
		_, err := New(tc.locks, tc.jobs, tc.opts...)
		if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	good := map[string]string{"j": "@every 1s", "c": "CRON_TZ=Europe/Paris 0 3 * * *", "e": "@every 5s"}
	if _, err := New(locks, good, scheduler.WithLogger(nil)); err != nil {
		t.Errorf("good config refused: %v", err)
	}
}

// TestRefusedRunsWarnOnce: a job the locker does not know (ErrInvalid), and
// a cron run beyond the skew, fail Lock, reported as such, and each is
// logged at Warn once while it repeats.
func TestRefusedRunsWarnOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	now := time.Date(2026, 11, 28, 10, 0, 30, 0, time.UTC)
	var outcomes []scheduler.Outcome
	l, err := New(offlineLocks(t), map[string]string{"minutely": "0 * * * * *"}, scheduler.WithLocation(time.UTC),
		cronsim.WithClock[scheduler.Option](func() time.Time { return now }), scheduler.WithLogger(log),
		scheduler.WithObserver(func(ev scheduler.Event) { outcomes = append(outcomes, ev.Outcome) }))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := l.Lock(context.Background(), "other")
		if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "not registered") {
			t.Errorf("Lock(other) = %v, want ErrInvalid: not registered", err)
		}
		if _, err := l.Lock(context.Background(), "minutely"); err == nil || !strings.Contains(err.Error(), "not within the skew") {
			t.Errorf("Lock(minutely) at :30 = %v, want a run not within the skew", err)
		}
	}
	want := []scheduler.Outcome{scheduler.OutcomeFailed, scheduler.OutcomeSkippedBeyondSkew}
	if len(outcomes) != 6 || outcomes[0] != want[0] || outcomes[1] != want[1] {
		t.Errorf("outcomes %v, want %v three times", outcomes, want)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Errorf("%d Warn lines, want 2 (one per job):\n%s", n, buf.String())
	}
}

// TestFastJobWarnsOnce: gocron runs a job every second that was registered
// with a minute: the runs after the first find the tick taken, and the
// locker warns once that the job runs more often than registered.
func TestFastJobWarnsOnce(t *testing.T) {
	var buf workertest.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	l, err := New(offlineLocks(t), map[string]string{"j": "@every 1m"}, scheduler.WithSkew(100*time.Millisecond),
		cronsim.WithClock[scheduler.Option](func() time.Time { return now }), scheduler.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		lk, err := l.Lock(context.Background(), "j")
		switch {
		case i == 0 && err != nil:
			t.Fatalf("first Lock: %v", err)
		case i == 0:
			_ = lk.Unlock(context.Background())
		case !errors.Is(err, redlock.ErrLocked):
			t.Errorf("Lock %d within the minute = %v, want redlock.ErrLocked", i, err)
		}
		now = now.Add(time.Second)
	}
	if n := strings.Count(buf.String(), "started more often than its interval"); n != 1 {
		t.Errorf("%d pace warnings, want 1:\n%s", n, buf.String())
	}
}
