package workerconfig

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOnceLogsALineOncePerChangeOfState: go-redis's failed dial repeated a
// hundred times is one line; a line about another node is its own; after
// Forget (the node answers again) the next failure is logged again; and a
// line that stayed away for the quiet time returns.
func TestOnceLogsALineOncePerChangeOfState(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	once := NewOnce(time.Hour)
	r := RedisLog{L: once.Logger(base, "go-redis")}
	ctx := context.Background()
	for i := range 100 {
		r.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %v", i%3+1, "dial tcp 127.0.0.1:7001: connect: connection refused")
		r.Printf(ctx, "redis: connection pool: failed to dial after 1 attempts: %v", "dial tcp 127.0.0.1:7002: i/o timeout")
	}
	if got := strings.Count(buf.String(), "\n"); got != 2 || once.Dropped("go-redis") != 198 {
		t.Fatalf("%d lines (%d dropped), want 2:\n%s", got, once.Dropped("go-redis"), buf.String())
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "component=go-redis") {
		t.Fatalf("lines lack their level or source:\n%s", buf.String())
	}
	once.Forget("127.0.0.1:7001")
	r.Printf(ctx, "redis: connection pool: failed to dial after 1 attempts: %v", "dial tcp 127.0.0.1:7001: connect: connection refused")
	r.Printf(ctx, "redis: connection pool: failed to dial after 1 attempts: %v", "dial tcp 127.0.0.1:7002: i/o timeout")
	if got := strings.Count(buf.String(), "7001"); got != 2 || strings.Count(buf.String(), "7002") != 1 {
		t.Fatalf("after Forget of 7001:\n%s", buf.String())
	}

	// The quiet time, on the records' own clock.
	var qbuf bytes.Buffer
	q := NewOnce(time.Minute)
	h := q.Logger(slog.New(slog.NewTextHandler(&qbuf, nil)), "asynq").Handler()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{0, 30 * time.Second, 89 * time.Second, 150 * time.Second} {
		_ = h.Handle(ctx, slog.NewRecord(at.Add(d), slog.LevelError, "Dequeue error: UNKNOWN: dial tcp: connection refused", 0))
	}
	if got := strings.Count(qbuf.String(), "\n"); got != 2 {
		t.Fatalf("%d lines, want 2 (the first, and the one after a minute of silence):\n%s", got, qbuf.String())
	}

	// Control: a line whose state ends before each repeat (quiet 1ns,
	// records 1ms apart) is logged every time.
	var cbuf bytes.Buffer
	c := NewOnce(time.Nanosecond).Logger(slog.New(slog.NewTextHandler(&cbuf, nil)), "asynq").Handler()
	for i := range 100 {
		_ = c.Handle(ctx, slog.NewRecord(at.Add(time.Duration(i)*time.Millisecond), slog.LevelError, "Dequeue error: refused", 0))
	}
	if got := strings.Count(cbuf.String(), "\n"); got != 100 {
		t.Fatalf("control: %d lines, want 100", got)
	}
}

// TestOnceMasksWhatChangesAtEveryRepeat: task IDs, connection numbers and
// durations do not make a repeat a new line.
func TestOnceMasksWhatChangesAtEveryRepeat(t *testing.T) {
	for _, pair := range [][2]string{
		{"Failed to extend lease for tasks [0b9c1f7e-8d3a-4c3e-9f0a-1b2c3d4e5f60]: x", "Failed to extend lease for tasks [7a9c1f7e-8d3a-4c3e-9f0a-1b2c3d4e5f61]: x"},
		{"conn[12] has unread data", "conn[13] has unread data"},
		{"slow: took 1.5s", "slow: took 250ms"},
	} {
		if mask(pair[0]) != mask(pair[1]) {
			t.Errorf("%q and %q are different lines: %q, %q", pair[0], pair[1], mask(pair[0]), mask(pair[1]))
		}
	}
	if mask("dial tcp 127.0.0.1:7001: refused") == mask("dial tcp 127.0.0.1:7002: refused") {
		t.Error("two addresses are one line")
	}
}
