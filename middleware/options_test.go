package middleware

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/redlock"
)

// TestNewRejectsBadArguments: every configuration that cannot work is
// refused by New with an error that starts with "middleware: " and names
// what is wrong, and Lock panics with that very error.
func TestNewRejectsBadArguments(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		key  KeyFunc
		opts []Option
		nilc bool
		want string
	}{
		{name: "nil client", key: ByType(), nilc: true, want: "nil redlock client"},
		{name: "nil key", want: "nil KeyFunc"},
		{name: "ttl", key: ByType(), opts: []Option{WithTTL(0)}, want: "lock TTL must be positive"},
		{name: "wait", key: ByType(), opts: []Option{Wait(-1)}, want: "wait bound"},
		{name: "limit 0", key: ByType(), opts: []Option{WithLimit(0)}, want: "limit must be in [1, 1024], got 0"},
		{name: "limit -1", key: ByType(), opts: []Option{WithLimit(-1)}, want: "limit must be in [1, 1024], got -1"},
		{name: "progress", key: ByType(), opts: []Option{WithProgress(-1)}, want: "progress stall bound"},
		{name: "nil option", key: ByType(), opts: []Option{nil}, want: "nil option"},
		{name: "nil lock option", key: ByType(), opts: []Option{WithLockOptions(nil)}, want: "nil lock option in WithLockOptions"},
		{name: "nil broker", key: ByType(), opts: []Option{WithBroker(nil)}, want: "WithBroker: nil broker client"},
	}
	for _, tc := range cases {
		client := e.locks
		if tc.nilc {
			client = nil
		}
		_, err := New(client, tc.key, tc.opts...)
		if err == nil || !strings.HasPrefix(err.Error(), "middleware: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
			continue
		}
		func() {
			defer func() {
				if p := recover(); p == nil || p.(error).Error() != err.Error() {
					t.Errorf("%s: Lock panicked with %v, want New's error %v", tc.name, p, err)
				}
			}()
			Lock(client, tc.key, tc.opts...)
		}()
	}
}

// TestLoggerDefault: a nil logger is slog.Default(), which gets the
// middleware's lines (here the bad key's warning).
func TestLoggerDefault(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	h, err := New(e.locks, ByField("sku"), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	_ = h(&recorder{}).ProcessTask(context.Background(), task("stock:adjust", `{}`))
	if !strings.Contains(buf.String(), "bad lock key") {
		t.Fatalf("default logger got %q, want the bad key's warning", buf.String())
	}
}

// TestLockOptionsReachTheLock: WithLockOptions applies to every
// acquisition (here a fence, which a lock without WithFencing lacks).
func TestLockOptionsReachTheLock(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	for _, fencing := range []bool{false, true} {
		var opts []Option
		if fencing {
			opts = append(opts, WithLockOptions(redlock.WithFencing()))
		}
		rec := &recorder{}
		if err := Lock(e.locks, ByField("sku"), opts...)(rec).ProcessTask(context.Background(), adjust()); err != nil {
			t.Fatal(err)
		}
		if got := rec.infos[0].Fence > 0; got != fencing {
			t.Fatalf("fencing %v: fence %d", fencing, rec.infos[0].Fence)
		}
	}
}
