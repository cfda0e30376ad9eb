package scheduler

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// opsView is what an operator sees of a redlock client and its schedulers:
// every log line (both loggers write to it) and redlock's loss events, the
// source of the worker's asynqlock_lock_losses_total.
type opsView struct {
	mu     sync.Mutex
	logs   bytes.Buffer
	losses []redlock.Event
}

func (v *opsView) Write(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.logs.Write(p)
}

func (v *opsView) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(v, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (v *opsView) observe(e redlock.Event) {
	if e.Kind == redlock.EventLost {
		v.mu.Lock()
		v.losses = append(v.losses, e)
		v.mu.Unlock()
	}
}

// lossesOf counts the "lock lost" lines and loss events of resources
// starting with prefix.
func (v *opsView) lossesOf(prefix string) (lines, events int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, line := range strings.Split(v.logs.String(), "\n") {
		if strings.Contains(line, `msg="redlock lock lost"`) && strings.Contains(line, "resource="+prefix) {
			lines++
		}
	}
	for _, e := range v.losses {
		if strings.HasPrefix(e.Resource, prefix) {
			events++
		}
	}
	return lines, events
}

// opsClient is a redlock client on one redis-server node that reports to v.
func opsClient(t *testing.T, v *opsView) (*redlock.Client, *redistest.Server) {
	t.Helper()
	node := redistest.StartServer(t)
	// A patient node timeout: on a loaded machine a slow answer must not
	// pass for an outage (or a real loss of the control's lock).
	locks, err := redlock.NewFromURLs([]string{node.URL()}, redlock.WithNodeTimeout(time.Second),
		redlock.WithLogger(v.logger()), redlock.WithObserver(v.observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	return locks, node
}

// TestTickRecordExpiryIsNotALoss: a per-second job's tick records expire as
// designed, and the operator sees no lock loss for them: no "redlock lock
// lost" line, no loss event. The control, a job whose running lock is
// force-released while it runs, is reported lost exactly once. Before tick
// records were left to expire, each tick produced one loss of its record.
func TestTickRecordExpiryIsNotALoss(t *testing.T) {
	v := &opsView{}
	locks, _ := opsClient(t, v)
	s, err := New(locks, WithLogger(v.logger()), WithSkew(100*time.Millisecond), WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 64)
	beat := func(context.Context) error { ran <- struct{}{}; return nil }
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	var once atomic.Bool
	long := func(ctx context.Context) error {
		if once.Swap(true) {
			return nil // the control runs once
		}
		started <- struct{}{}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return context.Cause(ctx)
	}
	for name, fn := range map[string]func(context.Context) error{"beat": beat, "long": long} {
		if err := s.Register(name, "* * * * * *", fn); err != nil {
			t.Fatal(err)
		}
	}
	s.Start()

	forceRelease(t, locks, runningResource("long"), started)
	select {
	case cause := <-ended:
		if !errors.Is(cause, redlock.ErrLockLost) {
			t.Fatalf("control job ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the control job's lock was not found lost")
	}
	waitFor(t, ran, 3, 20*time.Second)
	stop(t, s)
	waitRecordsGone(t, locks, "cron:beat:", "cron:long:")

	if lines, events := v.lossesOf("cron:beat:"); lines != 0 || events != 0 {
		t.Errorf("tick records of beat reported lost: %d log lines, %d events\n%s", lines, events, v.logs.String())
	}
	if lines, events := v.lossesOf("cron:long:"); lines != 1 || events != 1 {
		t.Errorf("control: %d lines and %d events for the forced release, want 1 each\n%s", lines, events, v.logs.String())
	}
}

// forceRelease deletes resource's lock as an operator would, once started
// says its holder runs.
func forceRelease(t *testing.T, locks *redlock.Client, resource string, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the control job did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil { // a loaded machine may make a call time out
		states, err := locks.Inspect(ctx, resource)
		if err == nil && len(states) == 1 && states[0].Token != "" {
			if n, err := locks.Admin().ForceRelease(ctx, resource, states[0].Token); n == 1 && err == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("could not force-release %s", resource)
}

// waitFor waits for n values on ch.
func waitFor(t *testing.T, ch <-chan struct{}, n int, limit time.Duration) {
	t.Helper()
	timeout := time.After(limit)
	for range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("fewer than %d runs within %v", n, limit)
		}
	}
}

// stop stops s, waiting for its jobs.
func stop(t *testing.T, s *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitRecordsGone waits until no lock under the prefixes is left on the
// nodes, and then for as long again as a lock's loss guard, so that a
// watchdog that was to report them lost has fired.
func waitRecordsGone(t *testing.T, locks *redlock.Client, prefixes ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		held := 0
		for _, p := range prefixes {
			n, err := heldUnder(ctx, locks, p)
			if err != nil {
				t.Fatal(err)
			}
			held += n
		}
		if held == 0 {
			time.Sleep(500 * time.Millisecond)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("tick records still held after 30s")
}

// heldUnder counts the resources under prefix that some node still holds
// (or failed to describe), as the operator's listing does: a scan of every
// node, then an inspection of each resource found.
func heldUnder(ctx context.Context, locks *redlock.Client, prefix string) (int, error) {
	found, _, err := locks.Admin().Scan(ctx, prefix)
	if err != nil {
		return 0, err
	}
	slices.Sort(found)
	held := 0
	for _, name := range slices.Compact(found) {
		states, err := locks.Inspect(ctx, name)
		if err != nil {
			return 0, err
		}
		if slices.ContainsFunc(states, func(s redlock.NodeState) bool { return s.Token != "" || s.Err != nil }) {
			held++
		}
	}
	return held, nil
}
