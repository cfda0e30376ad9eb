package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// parkTasks makes n tasks of queue look parked for res as the park path
// leaves them: in the retry set, their last error carrying the record's
// nonce, and recorded in res's FIFO in that order.
func (e *env) parkTasks(t *testing.T, queue, res string, n int) {
	t.Helper()
	ctx := context.Background()
	p := queuePrefix(queue)
	at := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i := range n {
		id, nonce := fmt.Sprintf("hot-%02d", i), fmt.Sprintf("p%02d", i)
		if err := e.raw.HSet(ctx, p+"t:"+id, "state", "retry", "msg", "conflict "+nonce).Err(); err != nil {
			t.Fatal(err)
		}
		e.raw.ZAdd(ctx, p+"retry", redis.Z{Score: float64(time.Now().Add(time.Minute).Unix()), Member: id})
		e.raw.RPush(ctx, fifoKey(queue, res), at+"|"+nonce+"|"+id)
	}
}

// TestPromotionDepthFollowsTheBacklog: with no other task of the queue
// pending, a promotion keeps the idle depth of tasks on their way; with a
// backlog, the busy depth, and none more until promoted tasks start.
func TestPromotionDepthFollowsTheBacklog(t *testing.T) {
	ctx := context.Background()
	d := depths{busy: 2, idle: 6}
	for _, tc := range []struct {
		name    string
		backlog int // other tasks pending in the queue
		want    int
	}{{"idle queue", 0, d.idle}, {"backlog", 1, d.busy}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			queue := "q-" + tc.name[:4]
			for i := range tc.backlog {
				e.raw.LPush(ctx, queuePrefix(queue)+"pending", fmt.Sprintf("cold-%d", i))
			}
			e.parkTasks(t, queue, res, 10)
			moved, left, err := promote(ctx, e.raw, queue, res, nil, d)
			if err != nil {
				t.Fatal(err)
			}
			if len(moved) != tc.want || left != 10-tc.want {
				t.Fatalf("promoted %d, %d left; want %d promoted", len(moved), left, tc.want)
			}
			// The promoted tasks are pending now; they are no backlog of
			// their own, and nothing more moves until they start.
			if again, _, err := promote(ctx, e.raw, queue, res, nil, d); err != nil || len(again) != 0 {
				t.Fatalf("second promotion moved %d (err %v), want 0", len(again), err)
			}
			// One starts: asynq moves it from pending to active.
			started := moved[0].id
			e.raw.LRem(ctx, queuePrefix(queue)+"pending", 1, started)
			e.raw.HSet(ctx, queuePrefix(queue)+"t:"+started, "state", "active")
			if again, _, err := promote(ctx, e.raw, queue, res, []string{started}, d); err != nil || len(again) != 1 {
				t.Fatalf("after one promoted task started, moved %d (err %v), want 1", len(again), err)
			}
		})
	}
}

// TestRunEndingBesideALocalWaiterLeavesThePromotionToIt: a run ending with
// no task of this process waiting for its resource promotes at once; with
// one waiting it asks nothing: the waiter asks when it starts (also for the
// ended run's queue if it came from another), or when it leaves the wait
// without the lock.
func TestRunEndingBesideALocalWaiterLeavesThePromotionToIt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cfg := defaultConfig()
	cfg.broker, cfg.logger = e.raw, slog.Default()
	m := &mw{cfg: cfg, waiters: map[string]int{}, promos: map[promoKey][]string{},
		promoReq: map[promoKey]bool{}, owed: map[string]string{}}
	const queue = "q-owed"
	asked := func(r string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.promos[promoKey{queue, r}]
		return ok
	}
	promotedFrom := func(r string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if e.raw.LLen(ctx, fifoKey(queue, r)).Val() < 5 {
				return
			}
		}
		t.Fatalf("no parked task of %s promoted", r)
	}
	for _, r := range []string{"alone", "got", "gave-up"} {
		e.parkTasks(t, queue, r, 5)
	}

	m.promoteAfter(queue, "alone")
	promotedFrom("alone")

	m.forceWait("got")
	m.promoteAfter(queue, "got")
	if asked("got") {
		t.Fatal("a run ending beside a local waiter asked for a promotion")
	}
	m.leaveWait("got", true)
	if asked("got") {
		t.Fatal("a waiter that got the lock asked for a promotion before its start")
	}
	m.promoteOnStart("q-other", "got", "task-of-q-other")
	promotedFrom("got")

	m.forceWait("gave-up")
	m.promoteAfter(queue, "gave-up")
	m.leaveWait("gave-up", false)
	promotedFrom("gave-up")
	if len(m.owed) != 0 {
		t.Fatalf("promotions still owed: %v", m.owed)
	}
}
