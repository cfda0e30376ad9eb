package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestWaitCapShares: within the cap, each resource with waiters gets an
// equal share; a newly hot resource gets a slot once one is free.
func TestWaitCapShares(t *testing.T) {
	c := NewWaitCap(4)
	for i := range 4 {
		if !c.enter("a", 1) {
			t.Fatalf("a's waiter %d refused: a alone may take the whole cap", i)
		}
	}
	if c.Waiting() != 4 || c.enter("b", 1) {
		t.Fatalf("%d waiting; a second resource entered a full cap", c.Waiting())
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
	c := NewWaitCap(4)
	var mws []asynq.MiddlewareFunc
	for range 2 {
		mws = append(mws, Lock(e.locks, ByField("sku"), WithPolicy(Wait(500*time.Millisecond)), WithMaxWaiters(100), WithWaitCap(c)))
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
			maxSeen = max(maxSeen, c.Waiting())
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
			if errors.Is(err, ErrConflict) {
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
			return c.Waiting()+requeued["HOT-0"]+requeued["HOT-1"] >= min(i+1, 4)+max(0, i+1-4)
		})
	}
	waitFor(t, "4 tasks waiting, 8 requeued", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return c.Waiting() == 4 && requeued["HOT-0"]+requeued["HOT-1"] == hot*perHot-4
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
	if maxSeen > 4 || c.Waiting() != 0 {
		t.Fatalf("at most %d waited at once (cap 4); %d still counted", maxSeen, c.Waiting())
	}
}
