package gocronlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/redlock"
)

// offlineLocks is a client on one node, which these tests never reach.
func offlineLocks(t *testing.T) *redlock.Client {
	t.Helper()
	return newLocks(t, redistest.StartCluster(t, 1))
}

// TestNewRefusesBadConfig: a configuration that cannot work is refused by
// New with ErrInvalid and a message naming what is wrong.
func TestNewRefusesBadConfig(t *testing.T) {
	locks := offlineLocks(t)
	job := WithInterval("j", time.Second)
	for _, tc := range []struct {
		name  string
		locks *redlock.Client
		opts  []Option
		want  string
	}{
		{"nil client", nil, []Option{job}, "nil redlock client"},
		{"no job", locks, nil, "no job"},
		{"nil option", locks, []Option{job, nil}, "nil option"},
		{"empty name", locks, []Option{WithInterval("", time.Second)}, "empty job name"},
		{"duplicate", locks, []Option{job, WithCron("j", "* * * * *")}, "registered twice"},
		{"sub-ms interval", locks, []Option{WithInterval("j", 500*time.Microsecond)}, "whole number of milliseconds"},
		{"fractional interval", locks, []Option{WithInterval("j", 1500*time.Microsecond)}, "whole number of milliseconds"},
		{"bad spec", locks, []Option{WithCron("j", "61 * * * *")}, `cron spec "61 * * * *"`},
		{"@every", locks, []Option{WithCron("j", "@every 5s")}, "gocron.DurationJob"},
		{"never", locks, []Option{WithCron("j", "0 0 30 2 *")}, "never activates"},
		{"skew", locks, []Option{job, WithSkew(0)}, "skew must be positive"},
		{"ttl", locks, []Option{job, WithTTL(-time.Second)}, "ttl must be positive"},
		{"prefix", locks, []Option{job, WithPrefix("")}, "empty key prefix"},
		{"location", locks, []Option{job, WithLocation(nil)}, "nil location"},
		{"clock", locks, []Option{job, WithClock(nil)}, "nil clock"},
	} {
		_, err := New(tc.locks, tc.opts...)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(locks, job, WithCron("c", "CRON_TZ=Europe/Paris 0 3 * * *"), WithLogger(nil)); err != nil {
		t.Errorf("good config refused: %v", err)
	}
}

// TestTicks: an interval job's tick is the interval it starts in, since the
// epoch; a cron job's the latest activation within the skew before it (or
// just ahead, by less than half the gap left by the skew).
func TestTicks(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	iv := interval{every: 10 * time.Second}
	for now, want := range map[string]string{
		"2026-11-28T10:00:00Z":        "2026-11-28T10:00:00Z",
		"2026-11-28T10:00:09.999Z":    "2026-11-28T10:00:00Z",
		"2026-11-28T10:00:10Z":        "2026-11-28T10:00:10Z",
		"1969-12-31T23:59:55Z":        "1969-12-31T23:59:50Z",
		"2026-11-28T10:00:05.5+01:00": "2026-11-28T09:00:00Z",
	} {
		tick, end, _ := iv.tick(at(now))
		if !tick.Equal(at(want)) || end.Sub(tick) != 10*time.Second {
			t.Errorf("interval tick of %s = %s..%s, want %s", now, tick, end, want)
		}
	}
	ct, _, err := parseCron("c", "*/10 * * * * *", time.UTC, time.Second, at("2026-11-28T10:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	for now, want := range map[string]string{
		"2026-11-28T10:00:10.2Z": "2026-11-28T10:00:10Z",
		"2026-11-28T10:00:09.6Z": "2026-11-28T10:00:10Z", // early, within min(skew, (gap-skew)/2)
		"2026-11-28T10:00:11.5Z": "",                     // beyond the skew
		"2026-11-28T10:00:08.5Z": "",
	} {
		tick, _, ok := ct.tick(at(now))
		if (want == "") == ok || ok && !tick.Equal(at(want)) {
			t.Errorf("cron tick of %s = %s %v, want %q", now, tick, ok, want)
		}
	}
}

// TestRefusedRunsWarnOnce: a job the locker does not know, and a cron run
// beyond the skew, fail Lock with their sentinels, and each is logged at
// Warn once while it repeats.
func TestRefusedRunsWarnOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	now := time.Date(2026, 11, 28, 10, 0, 30, 0, time.UTC)
	l, err := New(offlineLocks(t), WithCron("minutely", "0 * * * * *"), WithLocation(time.UTC),
		WithClock(func() time.Time { return now }), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Lock(context.Background(), "other"); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("Lock(other) = %v, want ErrUnknownJob", err)
		}
		if _, err := l.Lock(context.Background(), "minutely"); !errors.Is(err, ErrBeyondSkew) {
			t.Errorf("Lock(minutely) at :30 = %v, want ErrBeyondSkew", err)
		}
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
	l, err := New(offlineLocks(t), WithInterval("j", time.Minute), WithSkew(100*time.Millisecond),
		WithClock(func() time.Time { return now }), WithLogger(log))
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
	if n := strings.Count(buf.String(), "runs more often than the interval registered"); n != 1 {
		t.Errorf("%d pace warnings, want 1:\n%s", n, buf.String())
	}
}
