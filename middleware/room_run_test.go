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
	started map[string]int
	order   []string // SKUs in the order their runs started
	release map[string]chan struct{}
}

func newGatedHandlers(skus ...string) *gatedHandlers {
	g := &gatedHandlers{started: map[string]int{}, release: map[string]chan struct{}{}}
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
		g.started[sku]++
		g.order = append(g.order, sku)
		g.mu.Unlock()
		<-g.release[sku]
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
		return nil
	})
}

func (g *gatedHandlers) hasStarted(sku string) bool { return g.startedCount(sku) > 0 }

func (g *gatedHandlers) startedCount(sku string) int {
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
	gate := &runGate{size: 2}
	hs := newGatedHandlers("X", "Y", "Z")
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, withRunGate(gate), Wait(time.Minute), withMaxWaiters(4))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(sku string) {
		wg.Go(func() { errs <- m.process(ctx, task("stock:adjust", `{"sku":"`+sku+`"}`), hs.handler(sku)) })
	}
	run("X")
	waitFor(t, "X running", func() bool { return hs.hasStarted("X") })
	run("X")
	waitFor(t, "the second X waiting for its lock", func() bool { return m.stateOf("task:stock:adjust:X").waiters == 1 })
	if n := gate.inUse(); n != 1 {
		t.Fatalf("%d places taken with one task running and one waiting, want 1", n)
	}
	run("Y")
	waitFor(t, "Y running beside X while X's second task waits", func() bool { return hs.hasStarted("Y") })
	run("Z")
	waitFor(t, "Z waiting for a place", func() bool { _, others := gate.queued(); return others == 1 })
	if h := e.holder(t, "task:stock:adjust:Z"); h != "" {
		t.Fatalf("Z took its lock (%q) while the gate was full: no more tasks may try for their locks than it has places", h)
	}
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
	if hs.most != 2 || gate.inUse() != 0 {
		t.Fatalf("%d ran at once with a gate of 2 (want 2); %d places still taken", hs.most, gate.inUse())
	}
}

// gateBed is a middleware under a gate of 2 brought to this: a ran X, b
// waited for X and got it when a ended, and found the gate full (c runs Y,
// d runs Z, which had waited for a place), while w waits for a place since
// before b got X.
type gateBed struct {
	e    *env
	gate *runGate
	hs   *gatedHandlers
	done map[string]chan error
}

func newGateBed(t *testing.T, bctx context.Context) *gateBed {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	b := &gateBed{e: e, gate: &runGate{size: 2}, hs: newGatedHandlers("X", "Y", "Z", "W"), done: map[string]chan error{}}
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, withRunGate(b.gate), Wait(time.Minute), withMaxWaiters(4))
	run := func(ctx context.Context, name, sku string) {
		b.done[name] = make(chan error, 1)
		go func() { b.done[name] <- m.process(ctx, task("stock:adjust", `{"sku":"`+sku+`"}`), b.hs.handler(sku)) }()
	}
	queued := func(h, o int) func() bool {
		return func() bool { holders, others := b.gate.queued(); return holders == h && others == o }
	}
	run(context.Background(), "a", "X")
	waitFor(t, "a running", func() bool { return b.hs.startedCount("X") == 1 })
	run(bctx, "b", "X")
	waitFor(t, "b waiting for X, its place given back", func() bool { return m.stateOf("task:stock:adjust:X").waiters == 1 && b.gate.inUse() == 1 })
	run(context.Background(), "c", "Y")
	waitFor(t, "c running", func() bool { return b.hs.startedCount("Y") == 1 })
	run(context.Background(), "d", "Z")
	waitFor(t, "d waiting for a place", queued(0, 1))
	run(context.Background(), "w", "W")
	waitFor(t, "w waiting for a place", queued(0, 2))
	close(b.hs.release["X"]) // a's place goes to d, X to b
	waitFor(t, "b holding X at the full gate, w still waiting", queued(1, 1))
	if b.hs.startedCount("Z") != 1 || b.hs.startedCount("X") != 1 {
		t.Fatal("d did not take a's place")
	}
	return b
}

func (b *gateBed) finish(t *testing.T, names ...string) {
	t.Helper()
	for _, sku := range []string{"Y", "Z", "W"} {
		select {
		case <-b.hs.release[sku]:
		default:
			close(b.hs.release[sku])
		}
	}
	for _, name := range names {
		if err := <-b.done[name]; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := b.gate.inUse(); n != 0 {
		t.Fatalf("%d places still taken", n)
	}
}

// TestRunGateLetsHoldersInFirst: a task that got its lock after waiting is
// let into a full gate ahead of a task that has waited longer for a place
// but holds no lock.
func TestRunGateLetsHoldersInFirst(t *testing.T) {
	b := newGateBed(t, context.Background())
	close(b.hs.release["Y"]) // c's place: to b, not to w
	waitFor(t, "b running X", func() bool { return b.hs.startedCount("X") == 2 })
	b.finish(t, "a", "b", "c", "d", "w")
	if got := strings.Join(b.hs.order, " "); got != "X Y Z X W" {
		t.Fatalf("runs started in the order %s, want X Y Z X W: b holding X goes before w", got)
	}
	if b.hs.most != 2 {
		t.Fatalf("%d ran at once through a gate of 2", b.hs.most)
	}
}

// TestRunGateEndOfContextReleasesTheLock: a task whose context ends while
// it holds its lock at a full gate fails without running, and its lock is
// released at once rather than left to its TTL.
func TestRunGateEndOfContextReleasesTheLock(t *testing.T) {
	bctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newGateBed(t, bctx)
	cancel()
	if err := <-b.done["b"]; !errors.Is(err, context.Canceled) {
		t.Fatalf("b ended with %v, want context.Canceled", err)
	}
	if n := b.hs.startedCount("X"); n != 1 {
		t.Fatalf("X's handler ran %d times; b's context ended at the gate", n)
	}
	if h := b.e.heldAfter(t, "task:stock:adjust:X"); h != "" {
		t.Fatalf("X's lock is still held (%q) after b ended at the gate", h)
	}
	b.finish(t, "a", "c", "d", "w")
}

// TestRunGateCountsUnlockedTasks: tasks without a key, of two middlewares
// sharing a gate, take places like locked ones.
func TestRunGateCountsUnlockedTasks(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := &runGate{size: 1}
	hs := newGatedHandlers("none", "wrapped")
	noKey := func(context.Context, *asynq.Task) (string, error) { return "", nil }
	m, _ := lockMW(t, e.locks, noKey, nil, withRunGate(gate))
	other, _ := lockMW(t, e.locks, noKey, nil, withRunGate(gate))
	done := make(chan error, 2)
	go func() { done <- m.process(context.Background(), task("report", `{}`), hs.handler("none")) }()
	waitFor(t, "the keyless task running", func() bool { return hs.hasStarted("none") })
	go func() { done <- other.process(context.Background(), task("ping", `{}`), hs.handler("wrapped")) }()
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

// TestRunGatePlaceEndsWithTheHandler: a task's place is given back when its
// handler returns, not after its clean-up: while a failed task's rollback
// still runs under its lock, a task of another resource runs in its place.
func TestRunGatePlaceEndsWithTheHandler(t *testing.T) {
	e := patientEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	gate := &runGate{size: 1}
	inRollback, endRollback := make(chan struct{}), make(chan struct{})
	rollback := func(context.Context, *asynq.Task, error) error {
		close(inRollback)
		<-endRollback
		return nil
	}
	m, _ := lockMW(t, e.locks, ByField("sku"), nil, withRunGate(gate), WithRollback(rollback))
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
	if n := gate.inUse(); n != 0 {
		t.Fatalf("%d places still taken", n)
	}
}

// inUse is how many places are taken.
func (g *runGate) inUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.taken
}

// queued is how many tasks wait for a place, holding their locks or not.
func (g *runGate) queued() (holders, others int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queues[0]), len(g.queues[1])
}

// TestRoomShares: a room's places make its gate and cap, and each
// resource may have half the larger number waiting (at least one).
func TestRoomShares(t *testing.T) {
	for _, c := range []struct{ run, wait, maxWaiters int }{{8, 16, 8}, {8, 3, 4}, {8, 0, 4}, {1, 0, 1}, {0, 6, 3}} {
		r := newRoom(c.run, c.wait)
		if r.maxWaiters != c.maxWaiters || (r.run != nil) != (c.run > 0) || (r.wait != nil) != (c.wait > 0) {
			t.Errorf("newRoom(%d, %d): %d waiters per resource, gate %v, cap %v; want %d", c.run, c.wait, r.maxWaiters, r.run != nil, r.wait != nil, c.maxWaiters)
		}
	}
}

// TestHolderWithoutARunPlaceStartsAndEnds: a task that waited for its
// lock, got it, and then no run place before its context ended was a start
// and an end of its resource all the same: the promoter hears them, and the
// tasks parked on the resource move on rather than wait for their backstop.
func TestHolderWithoutARunPlaceStartsAndEnds(t *testing.T) {
	ctx := context.Background()
	e := patientEnv(t)
	const queue = "q-no-place"
	withMeta(t, taskMeta{id: "t1", queue: queue, maxRetry: 3, known: true})
	gate := &runGate{size: 1}
	m, h := lockMW(t, e.locks, ByType(), &recorder{}, withRunGate(gate), WithBroker(e.raw),
		Wait(time.Minute), withMaxWaiters(4))
	res := "task:stock:adjust:stock:adjust"
	held, err := e.other.TryAcquire(ctx, res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.parkTasks(t, queue, res, 5)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(tctx, task("stock:adjust", "")) }()
	waitFor(t, "the task waiting for its lock, its place given back", func() bool {
		return m.stateOf(res).waiters == 1 && gate.inUse() == 0
	})
	if err := gate.place().take(ctx, false); err != nil { // the gate is full now
		t.Fatal(err)
	}
	_ = held.Release(ctx)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "waiting to run") {
		t.Fatalf("want the run place's wait to end the task, got %v", err)
	}
	waitFor(t, "parked tasks promoted after the holder's start and end", func() bool {
		return e.raw.LLen(ctx, fifoKey(queue, res)).Val() < 5
	})
	waitFor(t, "the holder uncounted", func() bool { return !m.heldHere(res) })
}
