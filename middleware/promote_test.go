package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// parkTasks makes n tasks of queue look parked for res as the park path
// leaves them: in the retry set, their last error carrying the record's
// nonce, and recorded in res's FIFO in that order.
func (e *env) parkTasks(t *testing.T, queue, res string, n int) {
	e.parkTasksAt(t, queue, res, n, time.Now(), time.Now().Add(time.Minute).Truncate(time.Second))
}

// parkTasksAt is parkTasks with the records written at parkedAt and the
// tasks due in the retry set at due.
func (e *env) parkTasksAt(t *testing.T, queue, res string, n int, parkedAt, due time.Time) {
	t.Helper()
	ctx := context.Background()
	p := queuePrefix(queue)
	at := strconv.FormatInt(parkedAt.UnixMilli(), 10)
	e.raw.SAdd(ctx, "asynq:queues", queue) // as asynq registers a queue
	for i := range n {
		id, nonce := fmt.Sprintf("hot-%02d", i), fmt.Sprintf("p%02d", i)
		if err := e.raw.HSet(ctx, p+"t:"+id, "state", "retry", "msg", "conflict "+nonce).Err(); err != nil {
			t.Fatal(err)
		}
		e.raw.ZAdd(ctx, p+"retry", redis.Z{Score: float64(due.UnixMilli()) / 1000, Member: id})
		e.raw.RPush(ctx, fifoKey(queue, res), at+"|"+nonce+"|"+id)
	}
}

// TestPromotionDepthFollowsTheBacklog: with no other task of the queue
// pending, a promotion keeps the idle depth of tasks on their way; with a
// backlog, the busy depth, and none more until promoted tasks start.
func TestPromotionDepthFollowsTheBacklog(t *testing.T) {
	d := depths{busy: 2, idle: 6}
	for _, tc := range []struct {
		name    string
		backlog int // other tasks pending in the queue
		want    int
	}{{"idle queue", 0, d.idle}, {"backlog", 1, d.busy}} {
		t.Run(tc.name, func(t *testing.T) { promoteDepthCase(t, d, tc.backlog, tc.want) })
	}
}

func promoteDepthCase(t *testing.T, d depths, backlog, want int) {
	ctx := context.Background()
	e := newEnv(t)
	const queue = "q-depth"
	for i := range backlog {
		e.raw.LPush(ctx, queuePrefix(queue)+"pending", fmt.Sprintf("cold-%d", i))
	}
	e.parkTasks(t, queue, res, 10)
	insp := asynq.NewInspectorFromRedisClient(e.raw)
	moved, left, err := promote(ctx, e.raw, insp, queue, res, nil, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != want || left != 10-want {
		t.Fatalf("promoted %d, %d left; want %d promoted", len(moved), left, want)
	}
	// The promoted tasks are pending now; they are no backlog of their own,
	// and nothing more moves until they start.
	if again, _, err := promote(ctx, e.raw, insp, queue, res, nil, d); err != nil || len(again) != 0 {
		t.Fatalf("second promotion moved %d (err %v), want 0", len(again), err)
	}
	// One starts: asynq moves it from pending to active.
	started := moved[0].id
	e.raw.LRem(ctx, queuePrefix(queue)+"pending", 1, started)
	e.raw.HSet(ctx, queuePrefix(queue)+"t:"+started, "state", "active")
	again, _, err := promote(ctx, e.raw, insp, queue, res, []string{started}, d)
	if err != nil || len(again) != 1 {
		t.Fatalf("after one promoted task started, moved %d (err %v), want 1", len(again), err)
	}
}

// TestParkedTaskStaysPromotableForASecond: a task parked with the shortest
// backstop a second ago, at the worst phase of a second (asynq's retry
// scores are whole seconds: the backstop is cut by up to one), is still
// promoted, not left to asynq's forwarder, whose next round may be seconds
// away (DelayedTaskCheckInterval, 5s by default). With a 2s backstop and a
// 1s margin, such records were dropped at once, and a hot resource's drain
// stalled (integration TestLimitThroughAsynq: 3 slots as slow as 1).
func TestParkedTaskStaysPromotableForASecond(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	parkedAt := time.Now().Add(-time.Second)
	e.parkTasksAt(t, "q-due", res, 1, parkedAt, parkedAt.Add(parkBackstopMin-time.Second))
	insp := asynq.NewInspectorFromRedisClient(e.raw)
	moved, left, err := promote(ctx, e.raw, insp, "q-due", res, nil, depths{busy: 2, idle: 6})
	if err != nil || len(moved) != 1 || left != 0 {
		t.Fatalf("promoted %d, %d left (err %v); want the task parked a second ago promoted", len(moved), left, err)
	}
}

// TestPromotionCountsStartedTasksWithNothingParked: a started task leaves
// the promoted set even when nothing is parked any more.
func TestPromotionCountsStartedTasksWithNothingParked(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.raw.ZAdd(ctx, outKey("q", res), redis.Z{Score: 1, Member: "started"})
	if moved, left, err := promote(ctx, e.raw, asynq.NewInspectorFromRedisClient(e.raw), "q", res,
		[]string{"started"}, depths{busy: 2, idle: 6}); err != nil || len(moved) != 0 || left != 0 {
		t.Fatalf("moved %d, left %d, err %v; want nothing", len(moved), left, err)
	}
	if n := e.raw.ZCard(ctx, outKey("q", res)).Val(); n != 0 {
		t.Fatalf("%d promoted task(s) still counted on their way", n)
	}
}

// TestRunEndingBesideALocalWaiterLeavesThePromotionToIt: a run ending with
// nobody of this process next on its resource promotes at once. Otherwise
// the promotion is owed: a waiter asks for it when it starts (also for the
// ended run's queue if it came from another), a successor that started
// already asks at its own end, and a waiter whose wait ends without the
// lock asks then.
func TestRunEndingBesideALocalWaiterLeavesThePromotionToIt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cfg := defaultConfig()
	cfg.broker, cfg.inspector, cfg.logger = e.raw, asynq.NewInspectorFromRedisClient(e.raw), slog.Default()
	m := newMW(e.locks, nil, cfg)
	const queue = "q-owed"
	owed := func(r string) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		if e, ok := m.res[r]; ok {
			return e.owed
		}
		return ""
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
	for _, r := range []string{"alone", "got", "early", "gave-up"} {
		e.parkTasks(t, queue, r, 5)
	}

	for _, r := range []string{"alone", "got", "early", "gave-up"} {
		m.contended(r) // only a contended resource promotes
	}
	m.onTurn(true, queue, "alone", "")
	promotedFrom("alone")

	got := m.forceWait("got")
	m.onTurn(true, queue, "got", "")
	m.leaveWait("got", got, true)
	if q := owed("got"); q != queue {
		t.Fatalf("owed %q after a run ended beside a waiter that then got the lock, want %q", q, queue)
	}
	m.onTurn(false, "q-other", "got", "task-of-q-other")
	promotedFrom("got")

	// Its release answered after its successor here had started (counted).
	ended, successor := m.holding("early"), m.holding("early")
	m.ended("early", ended, queue, time.Time{})
	if q := owed("early"); q != queue {
		t.Fatalf("owed %q after a run ended behind a successor that started, want %q", q, queue)
	}
	m.ended("early", successor, queue, time.Time{})
	promotedFrom("early")

	held, err := e.other.TryAcquire(ctx, "gave-up", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	gaveUp := m.forceWait("gave-up")
	m.onTurn(true, queue, "gave-up", "")
	gaveUpRun := &taskRun{m: m, res: "gave-up", opts: m.cfg.lockOpts}
	if _, err := gaveUpRun.waitFor(ctx, gaveUp, 100*time.Millisecond); err == nil {
		t.Fatal("got a lock the other client holds")
	}
	promotedFrom("gave-up")
	for _, r := range []string{"alone", "got", "early", "gave-up"} {
		if q := owed(r); q != "" {
			t.Fatalf("promotion of %s still owed to %s", r, q)
		}
	}
}

// TestHandlerPanicPromotesParkedTasks: a run that ends in a panic promotes
// the tasks parked meanwhile, as any other end does; without it they would
// wait for their backstop. The resource met contention in this process (a
// task of it conflicted meanwhile): only then do its ends promote.
func TestHandlerPanicPromotesParkedTasks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
	cfg := defaultConfig()
	WithBroker(e.raw)(&cfg)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m := newMW(e.locks, ByField("sku"), cfg)
	rec := &recorder{fn: func(context.Context) error {
		e.parkTasks(t, "default", res, 3)
		m.contended(res)
		panic("handler bug")
	}}
	h := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return m.process(ctx, t, rec) })
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = h.ProcessTask(ctx, adjust())
	}()
	for deadline := time.Now().Add(10 * time.Second); e.raw.LLen(ctx, fifoKey("default", res)).Val() == 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("tasks parked during a run that panicked were not promoted at its end")
		}
	}
}

// TestParkFollowUpAtFollowFirst: a park's own follow-up call is asked for
// followFirst after the park, whatever calls were made meanwhile
// (docs/guide/HOTKEYS.md, "Who promotes", 1), not a backoff later.
func TestParkFollowUpAtFollowFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMW(nil, nil, defaultConfig())
		m.mu.Lock()
		p := m.entry("r").promo("q")
		p.running = true // no promotion loop: the test reads the request
		m.mu.Unlock()
		m.parkedHere("q", "r", 1)
		time.Sleep(followFirst + time.Millisecond)
		synctest.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		if !p.req {
			t.Fatalf("no follow-up call asked for %v after the park", followFirst)
		}
	})
}

// TestObserverPanicReleasesTheLock: an application's observer that panics
// when a task gets its lock (before the handler runs) leaves neither the lock
// on the nodes nor the resource counted as held here, where every later task
// of it would skip its try and wait.
func TestObserverPanicReleasesTheLock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t1", queue: "default", maxRetry: 3, known: true})
	observer := func(ev Event) {
		if ev.Kind == kindAcquired {
			panic("observer bug")
		}
	}
	rec := &recorder{}
	m, h := lockMW(t, e.locks, ByField("sku"), rec, WithObserver(observer))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = h.ProcessTask(ctx, adjust())
	}()
	for deadline := time.Now().Add(10 * time.Second); m.heldHere(res); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the resource stays held here after the observer panicked")
		}
	}
	l, err := e.other.TryAcquire(ctx, res, time.Second)
	if err != nil {
		t.Fatalf("the lock was left on the nodes: %v", err)
	}
	_ = l.Release(ctx)
}
