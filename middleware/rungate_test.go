package middleware

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// gatedHandlers is a handler that blocks each run until its SKU is let go,
// and counts the runs in progress.
type gatedHandlers struct {
	mu      sync.Mutex
	running int
	most    int
	started map[string]bool
	release map[string]chan struct{}
}

func newGatedHandlers(skus ...string) *gatedHandlers {
	g := &gatedHandlers{started: map[string]bool{}, release: map[string]chan struct{}{}}
	for _, s := range skus {
		g.release[s] = make(chan struct{})
	}
	return g
}

func (g *gatedHandlers) handler(sku string) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		g.mu.Lock()
		g.running++
		g.most = max(g.most, g.running)
		g.started[sku] = true
		g.mu.Unlock()
		<-g.release[sku]
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
		return nil
	})
}

func (g *gatedHandlers) hasStarted(sku string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started[sku]
}

// TestRunGateLeavesWaitersOutOfItsPlaces: with a gate of 2, a task that
// waits for its lock holds no place, so a task of another resource runs
// beside the holder; a third running task waits for a place, and the gate
// never lets more than 2 run.
func TestRunGateLeavesWaitersOutOfItsPlaces(t *testing.T) {
	ctx := context.Background()
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := NewRunGate(2)
	hs := newGatedHandlers("X", "Y", "Z")
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, WithRunGate(gate), WithPolicy(Wait(time.Minute)), WithMaxWaiters(4))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(sku string) {
		wg.Go(func() { errs <- m.process(ctx, task("stock:adjust", `{"sku":"`+sku+`"}`), hs.handler(sku)) })
	}
	run("X")
	waitFor(t, "X running", func() bool { return hs.hasStarted("X") })
	run("X")
	waitFor(t, "the second X waiting for its lock", func() bool { return m.waiting("task:stock:adjust:X") == 1 })
	if n := len(gate.places); n != 1 {
		t.Fatalf("%d places taken with one task running and one waiting, want 1", n)
	}
	run("Y")
	waitFor(t, "Y running beside X while X's second task waits", func() bool { return hs.hasStarted("Y") })
	run("Z")
	waitFor(t, "Z holding its lock", func() bool { return e.holder(t, "task:stock:adjust:Z") != "" })
	close(hs.release["Y"]) // Z takes Y's place
	waitFor(t, "Z running once Y returned", func() bool { return hs.hasStarted("Z") })
	close(hs.release["Z"])
	close(hs.release["X"]) // both X tasks run, one after the other
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if hs.most != 2 || len(gate.places) != 0 {
		t.Fatalf("%d ran at once with a gate of 2 (want 2); %d places still taken", hs.most, len(gate.places))
	}
}

// TestRunGateEndOfContextReleasesTheLock: a task whose context ends while
// it holds its lock and the gate is full fails without running, and its
// lock is released at once rather than left to its TTL.
func TestRunGateEndOfContextReleasesTheLock(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := NewRunGate(1)
	hs := newGatedHandlers("X", "Y")
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, WithRunGate(gate))
	xDone := make(chan error, 1)
	go func() {
		xDone <- m.process(context.Background(), task("stock:adjust", `{"sku":"X"}`), hs.handler("X"))
	}()
	waitFor(t, "X running", func() bool { return hs.hasStarted("X") })
	ctx, cancel := context.WithCancel(context.Background())
	yDone := make(chan error, 1)
	go func() { yDone <- m.process(ctx, task("stock:adjust", `{"sku":"Y"}`), hs.handler("Y")) }()
	waitFor(t, "Y holding its lock at the full gate", func() bool { return e.holder(t, "task:stock:adjust:Y") != "" })
	cancel()
	if err := <-yDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Y ended with %v, want context.Canceled", err)
	}
	if hs.hasStarted("Y") {
		t.Fatal("Y's handler ran although its context ended at the gate")
	}
	if h := e.holder(t, "task:stock:adjust:Y"); h != "" {
		t.Fatalf("Y's lock is still held (%q) after its task ended at the gate", h)
	}
	close(hs.release["X"])
	if err := <-xDone; err != nil {
		t.Fatal(err)
	}
}

// TestRunGateCountsUnlockedTasks: a task without a key and a handler
// wrapped by the gate take places like locked ones.
func TestRunGateCountsUnlockedTasks(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := NewRunGate(1)
	hs := newGatedHandlers("none", "wrapped")
	noKey := func(context.Context, *asynq.Task) (string, error) { return "", nil }
	m, _ := lockMW(t, e.locks, noKey, nil, WithRunGate(gate))
	done := make(chan error, 2)
	go func() { done <- m.process(context.Background(), task("report", `{}`), hs.handler("none")) }()
	waitFor(t, "the keyless task running", func() bool { return hs.hasStarted("none") })
	go func() { done <- gate.Wrap(hs.handler("wrapped")).ProcessTask(context.Background(), task("ping", `{}`)) }()
	close(hs.release["none"])
	waitFor(t, "the wrapped handler running after the keyless one", func() bool { return hs.hasStarted("wrapped") })
	close(hs.release["wrapped"])
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if hs.most != 1 {
		t.Fatalf("%d ran at once through a gate of 1", hs.most)
	}
}

func TestWithRunGateRefusesNil(t *testing.T) {
	e := newEnv(t)
	if _, err := New(e.locks, ByField("sku"), WithRunGate(nil)); err == nil || !strings.Contains(err.Error(), "WithRunGate: nil gate") {
		t.Fatalf("a nil gate gave %v, want it refused", err)
	}
}

// TestRunGatePlaceEndsWithTheHandler: a task's place is given back when its
// handler returns, not after its clean-up: while a failed task's rollback
// still runs under its lock, a task of another resource runs in its place.
func TestRunGatePlaceEndsWithTheHandler(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := NewRunGate(1)
	inRollback, endRollback := make(chan struct{}), make(chan struct{})
	rollback := func(context.Context, *asynq.Task, error) error {
		close(inRollback)
		<-endRollback
		return nil
	}
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, WithRunGate(gate), WithRollback(rollback))
	failing := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("out of stock") })
	xDone := make(chan error, 1)
	go func() { xDone <- m.process(context.Background(), task("stock:adjust", `{"sku":"X"}`), failing) }()
	<-inRollback
	hs := newGatedHandlers("Y")
	close(hs.release["Y"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // not about timing: fails rather than hangs
	defer cancel()
	if err := m.process(ctx, task("stock:adjust", `{"sku":"Y"}`), hs.handler("Y")); err != nil {
		t.Fatalf("Y, run while X's rollback held X's lock: %v", err)
	}
	close(endRollback)
	if err := <-xDone; err == nil || !strings.Contains(err.Error(), "out of stock") {
		t.Fatalf("X ended with %v, want its handler's error", err)
	}
	if n := len(gate.places); n != 0 {
		t.Fatalf("%d places still taken", n)
	}
}
