package middleware

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/redis/go-redis/v9"
)

// TestParkedTasksListsWhatParkRecorded: the listing reads the FIFO records
// park writes, per resource and queue, oldest first, and nothing else.
func TestParkedTasksListsWhatParkRecorded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := &mw{cfg: config{broker: e.raw}}
	for _, p := range []struct {
		queue, res, id string
	}{
		{"default", "sku:A", "t1"},
		{"default", "sku:A", "t2"},
		{"default", "sku:B", "t3"},
		{"low", "sku:A", "t4"},
		{"other", "sku:C", "t5"}, // a queue not asked for
	} {
		if _, _, err := m.park(ctx, p.queue, p.res, p.id, false); err != nil {
			t.Fatal(err)
		}
	}
	got, err := parkedTasks(ctx, e.raw, "default", "low")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"sku:A": {"t1", "t2", "t4"}, "sku:B": {"t3"}}
	if len(got) != len(want) {
		t.Fatalf("parked %v, want %v", got, want)
	}
	for res, ids := range want {
		if !slices.Equal(got[res], ids) {
			t.Errorf("%s: parked %v, want %v", res, got[res], ids)
		}
	}
}

// TestBrokerFailureIsLoggedOncePerChange: a failing park call is a warning
// naming the broker's address (never its password), logged once while the
// calls keep failing; the recovery is logged once too.
func TestBrokerFailureIsLoggedOncePerChange(t *testing.T) {
	var buf workertest.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	broker := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6399", Password: "s3cret"})
	t.Cleanup(func() { _ = broker.Close() })
	m := &mw{cfg: config{broker: broker, logger: logger}}
	for range 3 {
		m.warnPark(res, errors.New("connection refused"))
	}
	m.warnPark(res, nil)
	m.warnPark(res, nil)
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "broker=127.0.0.1:6399") || !strings.Contains(out, "connection refused") {
		t.Fatalf("want one warning naming the broker and the cause, got:\n%s", out)
	}
	if strings.Count(out, "parking busy tasks again") != 1 || strings.Contains(out, "s3cret") {
		t.Fatalf("want one recovery line and no password, got:\n%s", out)
	}
}

// TestClosedBrokerClientIsNoFailure: a promotion that meets the broker
// client closed by the application's shutdown warns nothing (the demo
// printed such a line at its end).
func TestClosedBrokerClientIsNoFailure(t *testing.T) {
	var buf workertest.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	broker := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6399"})
	_ = broker.Close()
	m := &mw{cfg: config{broker: broker, logger: logger}}
	m.warnPromote(res, broker.Ping(context.Background()).Err())
	if out := buf.String(); strings.Contains(out, "level=WARN") {
		t.Fatalf("a closed client was reported as a broker failure:\n%s", out)
	}
	m.warnPromote(res, errors.New("connection refused"))
	if out := buf.String(); !strings.Contains(out, "level=WARN") {
		t.Fatalf("a real failure after it was not reported:\n%s", out)
	}
}
