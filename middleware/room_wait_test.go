package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestWaitCapShares: within the cap, each resource with waiters gets an
// equal share; a newly hot resource gets a slot once one is free.
func TestWaitCapShares(t *testing.T) {
	c := newWaitCap(4)
	for i := range 4 {
		if !c.enter("a", 1) {
			t.Fatalf("a's waiter %d refused: a alone may take the whole cap", i)
		}
	}
	if c.waiting() != 4 || c.enter("b", 1) {
		t.Fatalf("%d waiting; a second resource entered a full cap", c.waiting())
	}
	c.leave("a")
	if !c.enter("b", 1) {
		t.Fatal("b refused a free slot")
	}
	c.leave("a")
	if c.enter("a", 1) {
		t.Fatal("a took more than its share (2 of 4) beside b")
	}
	if !c.enter("b", 1) {
		t.Fatal("b refused its share")
	}
	if c.enter("b", 1) {
		t.Fatal("b took more than its share")
	}
}

// TestWaitCapHoldsAcrossResources: tasks of many busy resources arrive at
// once through two middlewares sharing a cap of 4: never more than 4 wait,
// the others are requeued at once, two hot resources get 2 waiters each,
// and every slot is given back.
func TestWaitCapHoldsAcrossResources(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", maxRetry: 3, known: true})
	const hot, perHot = 2, 6
	for i := range hot {
		held, err := e.other.TryAcquire(ctx, fmt.Sprintf("task:stock:adjust:HOT-%d", i), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = held.Release(ctx) })
	}
	c := newWaitCap(4)
	var mws []asynq.MiddlewareFunc
	for range 2 {
		mws = append(mws, Lock(e.locks, ByField("sku"), Wait(500*time.Millisecond), withMaxWaiters(100), withWaitCap(c)))
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		requeued  = map[string]int{}
		maxSeen   int
		stopWatch = make(chan struct{})
	)
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for {
			mu.Lock()
			maxSeen = max(maxSeen, c.waiting())
			mu.Unlock()
			select {
			case <-stopWatch:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for i := range hot * perHot {
		sku := fmt.Sprintf("HOT-%d", i%hot)
		h := mws[i%2](&recorder{})
		wg.Go(func() {
			err := h.ProcessTask(ctx, task("stock:adjust", `{"sku":"`+sku+`"}`))
			if errors.Is(err, errConflict) {
				mu.Lock()
				requeued[sku]++
				mu.Unlock()
			}
		})
		// One arrival at a time, alternating between the resources, so
		// that the shares are deterministic.
		waitFor(t, "the arrival waiting or requeued", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return c.waiting()+requeued["HOT-0"]+requeued["HOT-1"] >= min(i+1, 4)+max(0, i+1-4)
		})
	}
	waitFor(t, "4 tasks waiting, 8 requeued", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return c.waiting() == 4 && requeued["HOT-0"]+requeued["HOT-1"] == hot*perHot-4
	})
	mu.Lock()
	got := fmt.Sprint(requeued)
	mu.Unlock()
	if got != fmt.Sprintf("map[HOT-0:%d HOT-1:%d]", perHot-2, perHot-2) {
		t.Fatalf("requeued per resource %s, want %d each (2 waiters each)", got, perHot-2)
	}
	wg.Wait()
	close(stopWatch)
	<-watch
	if maxSeen > 4 || c.waiting() != 0 {
		t.Fatalf("at most %d waited at once (cap 4); %d still counted", maxSeen, c.waiting())
	}
}

// TestWaitCapSharesSizePromotion: under a cap, a resource's promotion
// depth and its fresh waiters follow its share of the cap: with three hot
// resources each is promoted about a third of the cap, so that together
// they bring no more tasks than the process lets wait; alone it keeps the
// depth WithMaxWaiters gives with a backlog, and the cap's size without.
// Without a cap nothing changes.
func TestWaitCapSharesSizePromotion(t *testing.T) {
	e := patientEnv(t)
	c := newWaitCap(16)
	m, _ := lockMW(t, e.locks, ByType(), &recorder{}, withMaxWaiters(8), withWaitCap(c))
	bare, _ := lockMW(t, e.locks, ByType(), &recorder{}, withMaxWaiters(8))
	if got, want := m.promoteDepth("a"), (depths{busy: 8, idle: 16}); got != want {
		t.Errorf("alone: depths %+v, want %+v (the cap's size without backlog)", got, want)
	}
	if got := m.freshShare("a", false); got != 4 {
		t.Errorf("alone: %d fresh waiters, want 4 (half of WithMaxWaiters)", got)
	}
	for _, res := range []string{"b", "c"} {
		if !c.enter(res, 1) {
			t.Fatalf("%s refused under an empty cap", res)
		}
	}
	if got, want := m.promoteDepth("a"), (depths{busy: 5, idle: 5}); got != want {
		t.Errorf("beside two hot resources: depths %+v, want %+v (a third of the cap)", got, want)
	}
	if got := m.freshShare("a", false); got != 2 {
		t.Errorf("beside two hot resources: %d fresh waiters, want 2 (half its share)", got)
	}
	if got, want := bare.promoteDepth("a"), (depths{busy: 8, idle: 24}); got != want {
		t.Errorf("without a cap: depths %+v, want %+v", got, want)
	}
}

// TestParkedTaskWithoutRoomKeepsItsTurn: a task parked once that comes
// back to find its resource busy and no room to wait (the cap full with
// another resource's waiters) is parked again at the head of its FIFO,
// ahead of the tasks parked after it, with a conflict that carries the
// record's nonce (so the next promotion brings it back first) rather than
// requeued on a timer behind them.
func TestParkedTaskWithoutRoomKeepsItsTurn(t *testing.T) {
	ctx := context.Background()
	e := patientEnv(t)
	const queue, busy = "default", "task:stock:adjust:HOT"
	held, err := e.other.TryAcquire(ctx, busy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(ctx) })
	c := newWaitCap(1)
	if !c.enter("task:stock:adjust:OTHER", 1) {
		t.Fatal("the other resource's waiter refused under an empty cap")
	}
	t.Cleanup(func() { c.leave("task:stock:adjust:OTHER") })
	m, h := lockMW(t, e.locks, ByField("sku"), &recorder{}, WithBroker(e.raw), withWaitCap(c))
	for _, id := range []string{"t0", "t1"} { // t0 parked first, t1 after it
		if _, _, err := m.park(ctx, queue, busy, id, false); err != nil {
			t.Fatal(err)
		}
	}
	withMeta(t, taskMeta{id: "t0", queue: queue, maxRetry: 3, known: true})
	err = h.ProcessTask(ctx, task("stock:adjust", `{"sku":"HOT"}`))
	var ce *conflictError
	if !errors.As(err, &ce) || ce.nonce == "" || !errors.Is(err, errConflict) {
		t.Fatalf("want a parked conflict carrying a nonce, got %v", err)
	}
	parked, err := parkedTasks(ctx, e.raw, queue)
	if err != nil {
		t.Fatal(err)
	}
	if got := parked[busy]; len(got) < 2 || got[0] != "t0" || got[1] != "t0" && got[1] != "t1" {
		t.Fatalf("FIFO %v: want t0 first again", got)
	}
	recs, err := e.raw.LRange(ctx, fifoKey(queue, busy), 0, 0).Result()
	if err != nil || len(recs) != 1 || !strings.Contains(recs[0], "|"+ce.nonce+"|t0") {
		t.Fatalf("head record %v (%v), want t0's with nonce %s", recs, err, ce.nonce)
	}
}

// TestWaitCapRefusedResourceGetsItsShare: a resource that filled the cap
// alone does not keep it against a newly hot one: once the newcomer was
// refused for want of room, the first resource is above its share, so the
// next free place goes to the newcomer, not to the first resource's next
// task. The control is the claim gone (claimFor past): the first resource
// takes the place back.
func TestWaitCapRefusedResourceGetsItsShare(t *testing.T) {
	c := newWaitCap(4)
	for range 4 {
		if !c.enter("a", 1) {
			t.Fatal("a refused under a cap it has alone")
		}
	}
	if c.enter("b", 1) {
		t.Fatal("b entered a full cap")
	}
	c.leave("a")
	if c.enter("a", 1) {
		t.Fatal("a took the freed place back while b, refused, waits for its share")
	}
	if !c.enter("b", 1) {
		t.Fatal("b refused the freed place")
	}
	c.leave("b")
	c.mu.Lock()
	c.per["b"] = waiters{limit: 1, claimed: time.Now().Add(-time.Millisecond)}
	c.mu.Unlock()
	if !c.enter("a", 1) {
		t.Fatal("control: with b's claim over, a did not get the free place")
	}
}

// TestDefaultWaitPlacesFollowTheTasksSeenAtOnce: with a broker and no WithRoom,
// the wait places are two thirds of the most tasks seen at once (at least
// one), and do not shrink when fewer run; a room, even of no places, sets
// none.
func TestDefaultWaitPlacesFollowTheTasksSeenAtOnce(t *testing.T) {
	e := newEnv(t)
	cfg := defaultConfig()
	cfg.broker = e.raw
	m := newMW(e.locks, nil, cfg)
	places := func() int {
		m.cfg.room.wait.mu.Lock()
		defer m.cfg.room.wait.mu.Unlock()
		return m.cfg.room.wait.max
	}
	if m.atOnce == nil || places() != 1 {
		t.Fatalf("no default wait places of one before any task")
	}
	for range 6 {
		m.atOnce.arrive()
	}
	if got := places(); got != 4 {
		t.Fatalf("6 tasks at once: %d wait places, want 4", got)
	}
	m.atOnce.now.Store(0)
	m.atOnce.arrive()
	if got := places(); got != 4 {
		t.Fatalf("after fewer tasks: %d wait places, want 4 still", got)
	}
	WithRoom(0, 0)(&cfg)
	if m := newMW(e.locks, nil, cfg); m.atOnce != nil || m.cfg.room.wait != nil {
		t.Fatal("a room of no places got default wait places")
	}
}

// waiting returns how many tasks wait under the cap now.
func (c *waitCap) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
