package scheduler

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/robfig/cron/v3"
)

func mustParse(t *testing.T, spec string, loc *time.Location) cron.Schedule {
	t.Helper()
	if loc == nil {
		loc = time.UTC
	}
	s, err := parse(spec, loc, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTickFor(t *testing.T) {
	base := time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	const ms = time.Millisecond
	everySec := Every(time.Second)
	fiveSec := mustParse(t, "*/5 * * * * *", time.UTC)
	tests := []struct {
		name        string
		sched       cron.Schedule
		now         time.Time
		late, early time.Duration
		want        time.Time // zero: no tick
	}{
		{"on time", everySec, at(0), 400 * ms, 300 * ms, at(0)},
		{"a little late", everySec, at(3 * ms), 400 * ms, 300 * ms, at(0)},
		{"late within skew", everySec, at(400 * ms), 400 * ms, 300 * ms, at(0)},
		{"later than skew", everySec, at(401 * ms), 400 * ms, 300 * ms, time.Time{}},
		{"early within tolerance", everySec, at(700 * ms), 400 * ms, 300 * ms, at(time.Second)},
		{"early beyond tolerance", everySec, at(699 * ms), 400 * ms, 300 * ms, time.Time{}},
		{"spec on time", fiveSec, at(5*time.Second + 20*ms), time.Second, time.Second, at(5 * time.Second)},
		{"spec early", fiveSec, at(4*time.Second + 100*ms), time.Second, time.Second, at(5 * time.Second)},
		{"spec between ticks", fiveSec, at(2500 * ms), time.Second, time.Second, time.Time{}},
		// Skew close to the interval: a run 900ms late is still the old
		// tick, one 960ms after it is the next tick, early.
		{"late near interval", everySec, at(900 * ms), 900 * ms, 50 * ms, at(0)},
		{"early near interval", everySec, at(960 * ms), 900 * ms, 50 * ms, at(time.Second)},
		{"gap near interval", everySec, at(920 * ms), 900 * ms, 50 * ms, time.Time{}},
		// A skew of the interval or more: the latest activation wins.
		{"skew of the interval", everySec, at(1000 * ms), time.Second, 0, at(time.Second)},
		{"skew over the interval", everySec, at(2500 * ms), 3 * time.Second, 0, at(2 * time.Second)},
		{"late by nearly the skew", fiveSec, at(5*time.Second + 7900*ms), 8 * time.Second, 0, at(10 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tickFor(tt.sched, tt.now, tt.late, tt.early)
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Fatalf("tickFor(%s) = %s, %v; want %s", tt.now.Format(time.StampMilli), got.Format(time.StampMilli), ok, tt.want.Format(time.StampMilli))
			}
		})
	}
}

// Replicas whose runs start anywhere within the skew of a tick compute the
// same tick, and consecutive ticks are never confused.
func TestTickForAgreesAcrossReplicas(t *testing.T) {
	for _, skew := range []time.Duration{100 * time.Millisecond, 450 * time.Millisecond, 900 * time.Millisecond} {
		r, err := newRunner(newMemLocks().client(), "j", Every(time.Second), noJob, withSkew(skew), background)
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2025, 1, 1, 0, 0, 7, 0, time.UTC)
		for off := -r.early; off <= skew; off += time.Millisecond {
			got, ok := tickFor(r.sched, base.Add(off), skew, r.early)
			if !ok || !got.Equal(base) {
				t.Fatalf("skew %v: run at %+v computed %v, %v", skew, off, got, ok)
			}
		}
	}
}

func withSkew(d time.Duration) config {
	c := defaultConfig()
	c.skew = d
	return c
}

func TestEverySchedule(t *testing.T) {
	s := Every(10 * time.Second)
	got := s.Next(time.Date(2025, 1, 1, 0, 0, 3, 500, time.UTC))
	if want := time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("Next = %v, want %v", got, want)
	}
	if got := s.Next(time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC)); !got.Equal(time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC)) {
		t.Fatalf("Next of an activation must be the following one, got %v", got)
	}
	if got := s.Next(time.Unix(-15, 0)); !got.Equal(time.Unix(-10, 0)) {
		t.Fatalf("before the epoch: got %v", got.Unix())
	}
	loc := time.FixedZone("X", 3*3600)
	if got := Every(time.Hour).Next(time.Date(2025, 1, 1, 5, 30, 0, 0, loc)); got.Location() != loc || got.Minute() != 0 {
		t.Fatalf("Next keeps the location and aligns to the hour: %v", got)
	}
	if !Every(time.Microsecond).Next(time.Now()).IsZero() {
		t.Fatal("an interval under 1ms must never activate")
	}
}

func TestParse(t *testing.T) {
	loc := time.FixedZone("UTC+5", 5*3600)
	from := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		spec string
		want time.Time
	}{
		{"*/10 * * * * *", from.Add(10 * time.Second)},                           // seconds field
		{"30 * * * *", from.Add(30 * time.Minute)},                               // 5 fields: minutes first
		{"@every 90s", time.Unix((from.Unix()/90+1)*90, 0)},                      // aligned to the epoch
		{"0 0 9 * * *", time.Date(2025, 6, 1, 9, 0, 0, 0, loc)},                  // in loc
		{"CRON_TZ=UTC 0 0 9 * * *", time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)}, // explicit zone wins
		{"@daily", time.Date(2025, 6, 1, 0, 0, 0, 0, loc).Add(24 * time.Hour)},   // descriptor in loc
		{"TZ=UTC @every 1h", time.Date(2025, 6, 1, 1, 0, 0, 0, time.UTC)},        // every with a zone: still aligned
		{"0 0 12 1 1 *", time.Date(2026, 1, 1, 12, 0, 0, 0, loc)},                // far away
		{"0 0 0 * * MON", time.Date(2025, 6, 2, 0, 0, 0, 0, loc)},                // 2025-06-02 is a Monday
		{"*/15 * * * * *", from.Add(15 * time.Second)},                           // step
		{"0 */5 * * * *", from.Add(5 * time.Minute)},                             // minutes
		{"0 0 */6 * * *", time.Date(2025, 6, 1, 6, 0, 0, 0, loc)},                // hours in loc
		{"@every 1m", from.Add(time.Minute)},                                     // aligned
		{"@hourly", from.Add(time.Hour)},                                         // top of the hour
	}
	for _, tt := range tests {
		s := mustParse(t, tt.spec, loc)
		if got := s.Next(from); !got.Equal(tt.want) {
			t.Errorf("%q: Next(%v) = %v, want %v", tt.spec, from, got, tt.want)
		}
	}
	if _, ok := mustParse(t, "@every 5s", nil).(everySchedule); !ok {
		t.Error("@every must become an everySchedule")
	}
	for _, bad := range []string{"", "* * *", "61 * * * * *", "@sometimes", "TZ=Nowhere/City * * * * *", "* * * * * * *"} {
		if _, err := parse(bad, time.UTC, false); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("parse(%q) = %v, want redlock.ErrInvalid", bad, err)
		}
	}
}

func TestMinGap(t *testing.T) {
	from := time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC) // a Monday
	tests := []struct {
		spec  string
		want  time.Duration
		never bool
	}{
		{"* * * * * *", time.Second, false},
		{"0,1 * * * * *", time.Second, false},
		{"0 0 9 * * MON-FRI", 24 * time.Hour, false},
		{"@every 90m", 90 * time.Minute, false},
		{"0 0 0 30 2 *", 0, true}, // February 30th
	}
	for _, tt := range tests {
		gap, never := minGap(mustParse(t, tt.spec, time.UTC), from)
		if gap != tt.want || never != tt.never {
			t.Errorf("%q: minGap = %v, %v; want %v, %v", tt.spec, gap, never, tt.want, tt.never)
		}
	}
}

func TestResources(t *testing.T) {
	tick := time.UnixMilli(1700000000123)
	if got := tickResource("report", tick); got != "cron:report:1700000000123" {
		t.Fatal(got)
	}
	if got := runningResource("report"); got != "cron:report:running" {
		t.Fatal(got)
	}
}

// Specs are in UTC unless a location or CRON_TZ says otherwise. In a zone
// with daylight saving time a daily job is skipped on the day the clock
// springs over its time and runs twice (at two instants, each once across
// replicas) on the day it falls back over it, as robfig/cron does.
func TestDefaultUTCAndDST(t *testing.T) {
	from := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	if got := mustParse(t, "30 2 * * *", nil).Next(from); !got.Equal(time.Date(2026, 3, 8, 2, 30, 0, 0, time.UTC)) {
		t.Fatalf("default location: next %v, want 02:30 UTC", got)
	}
	if cfg := defaultConfig(); cfg.loc != time.UTC {
		t.Fatalf("default location %v, want UTC", cfg.loc)
	}
	next := func(spec string, from time.Time, n int) []string {
		s := mustParse(t, spec, nil)
		var out []string
		for range n {
			from = s.Next(from)
			out = append(out, from.UTC().Format("01-02 15:04"))
		}
		return out
	}
	// 2026-03-08: New York springs from 02:00 EST to 03:00 EDT.
	if got, want := next("CRON_TZ=America/New_York 30 2 * * *", from, 2), []string{"03-09 06:30", "03-10 06:30"}; !slices.Equal(got, want) {
		t.Errorf("spring forward: %v, want %v (03-08 skipped)", got, want)
	}
	// 2026-11-01: New York falls from 02:00 EDT back to 01:00 EST.
	fall := time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)
	if got, want := next("CRON_TZ=America/New_York 30 1 * * *", fall, 3), []string{"11-01 05:30", "11-01 06:30", "11-02 06:30"}; !slices.Equal(got, want) {
		t.Errorf("fall back: %v, want %v (01:30 twice)", got, want)
	}
	if got, want := next("30 1 * * *", fall, 2), []string{"11-01 01:30", "11-02 01:30"}; !slices.Equal(got, want) {
		t.Errorf("UTC: %v, want %v", got, want)
	}
}
