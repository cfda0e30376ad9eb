package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestWorkerRefusesAWrongPasswordAtStart: a lock node URL with a wrong
// password is a configuration error, not an outage: New refuses it naming
// the node's address and WRONGPASS, never the password; so is a broker that
// wants a password the URL lacks, at Run before serving.
func TestWorkerRefusesAWrongPasswordAtStart(t *testing.T) {
	const secret = "n0t-The-Pw"
	f := newFixture(t)
	locked := redistest.StartServer(t, redistest.WithPassword("the-pw"))
	f.cfg.RedlockNodes[2] = "redis://:" + secret + "@" + locked.Addr()
	_, err := New(f.cfg, quiet())
	if !errors.Is(err, redlock.ErrInvalid) || !errors.Is(err, ErrConfig) {
		t.Fatalf("New = %v, want ErrInvalid and ErrConfig", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "node 2 (redis://:xxxxx@"+locked.Addr()+")") || !strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, secret) {
		t.Fatalf("error %q: want node 2 by its masked URL and WRONGPASS, never the password", msg)
	}

	f = newFixture(t)
	f.cfg.AsynqRedisURL = "redis://" + locked.Addr()
	err = refusal(t, f.cfg)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "NOAUTH") || !strings.Contains(err.Error(), locked.Addr()) {
		t.Fatalf("Run = %v, want a refusal naming the broker and NOAUTH", err)
	}
}

// TestWorkerWarnsThatTwoNodesTolerateNoFailure: one Warn line at start,
// saying what to use instead; none with three nodes.
func TestWorkerWarnsThatTwoNodesTolerateNoFailure(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		f := newFixture(t)
		f.cfg.RedlockNodes = f.cfg.RedlockNodes[:n]
		f.cfg.LogLevel = "warn"
		var out workertest.Buffer
		w, err := New(f.cfg, WithLogger(newLogger(f.cfg, &out)))
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, w)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		got := strings.Count(out.String(), "no failure tolerated")
		if want := map[int]int{1: 1, 2: 1, 3: 0}[n]; got != want || (want == 1 && !strings.Contains(out.String(), "level=WARN")) {
			t.Errorf("%d nodes: %d lines saying no failure is tolerated, want %d\n%s", n, got, want, out.String())
		}
	}
}

// TestWorkerRefusesAPasswordTheBrokerLacks: a password in ASYNQ_REDIS_URL
// for a broker that has none (which go-redis's HELLO AUTH would pass) makes
// Run refuse to start, naming the broker and never the password; the same
// password for a broker that has it starts (the control).
func TestWorkerRefusesAPasswordTheBrokerLacks(t *testing.T) {
	const secret = "n0t-The-Pw"
	f := newFixture(t)
	f.cfg.AsynqRedisURL = "redis://:" + secret + "@" + f.broker.Addr()
	err := refusal(t, f.cfg)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "has none configured") ||
		!strings.Contains(err.Error(), f.broker.Addr()) || strings.Contains(err.Error(), secret) {
		t.Fatalf("Run = %v, want a refusal naming the broker's address and the unused password, never the password", err)
	}

	locked := redistest.StartServer(t, redistest.WithPassword(secret))
	f.cfg.AsynqRedisURL = "redis://:" + secret + "@" + locked.Addr()
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	stop := workertest.Run(t, w)
	if err := stop(); err != nil {
		t.Fatalf("control: a broker with that password: Run = %v", err)
	}
}

// refusal runs a worker of cfg that is expected to refuse to start, and
// returns what Run returned (within 30s).
func refusal(t *testing.T, cfg Config) error {
	t.Helper()
	w, err := New(cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Run(ctx)
}
