package redlock

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// scriptBackend runs the package's commands and scripts (lua/*.lua) on one
// node: the in-memory fake (memNode.exec) or a redis-server running the
// real Lua. The cases below run alike on both, so the fake cannot drift.
type scriptBackend struct {
	do    func(args ...any) any   // one command; an error is the answer
	get   func(key string) string // "" when absent
	pttl  func(key string) int64  // ms, -2 when absent
	zcard func(key string) int64
}

// eval runs s with its source (EVAL), as a node answers after NOSCRIPT.
func (b scriptBackend) eval(s *transport.Script, keys []string, argv ...any) any {
	args := scriptArgs(s, keys, argv...)
	args[0], args[1] = "eval", s.Src
	return b.do(args...)
}

func memBackend() scriptBackend {
	m := newMemNode()
	return scriptBackend{
		do: func(args ...any) any {
			cmd := redis.NewCmd(context.Background(), args...)
			m.exec(cmd)
			if cmd.Err() != nil {
				return cmd.Err()
			}
			return cmd.Val()
		},
		get: func(key string) string { v, _ := m.get(key); return v },
		pttl: func(key string) int64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			if _, ok := m.getLocked(key); !ok {
				return -2
			}
			return time.Until(m.data[key].exp).Milliseconds()
		},
		zcard: func(key string) int64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			if z := m.zset(key, false); z != nil {
				return int64(len(z.m))
			}
			return 0
		},
	}
}

func redisBackend(t *testing.T) scriptBackend {
	srv := redistest.StartServer(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	return scriptBackend{
		do: func(args ...any) any {
			v, err := raw.Do(ctx, args...).Result()
			if err != nil {
				return err
			}
			return v
		},
		get:   func(key string) string { return raw.Get(ctx, key).Val() },
		pttl:  func(key string) int64 { return raw.Do(ctx, "pttl", key).Val().(int64) },
		zcard: func(key string) int64 { return raw.ZCard(ctx, key).Val() },
	}
}

// queueCase drives one backend through the steps of one case.
type queueCase struct {
	t *testing.T
	b scriptBackend
	k keys
}

const testLease = 60000 // ms: no entry lapses unless a case says so

func (q *queueCase) turn(old, token string, ticket int64, id string, fencing, keep bool, lease int64) any {
	return q.b.eval(turnScript, q.k.queueKeys(), old, token, 60000, ticket, id, lease, flag(fencing), 600000, q.k.channel, flag(keep))
}

// evalArgs runs s with its source, as eval does, on arguments built for
// its EVALSHA.
func (q *queueCase) evalArgs(s *transport.Script, args []any) any {
	args[0], args[1] = "eval", s.Src
	return q.b.do(args...)
}

func (q *queueCase) release(token string) any {
	return q.b.eval(queueReleaseScript, q.k.queueKeys()[:3], token, testLease, q.k.channel)
}

func (q *queueCase) leave(id string) any {
	return q.b.eval(leaveQueueScript, q.k.queueKeys()[:3], id, testLease, q.k.channel)
}

func (q *queueCase) want(step string, got any, want string) {
	q.t.Helper()
	if s := fmt.Sprint(got); s != want {
		q.t.Fatalf("%s: got %s, want %s", step, s, want)
	}
}

func (q *queueCase) holder(step, want string) {
	q.t.Helper()
	q.want(step+": lock key", q.b.get(q.k.key), want)
}

func (q *queueCase) queued(step string, want int64) {
	q.t.Helper()
	q.want(step+": queue length", q.b.zcard(q.k.key+":q"), fmt.Sprint(want))
}

// queueCases are the queue scripts' behaviours, run alike on the in-memory
// fake and on a redis-server so the two cannot drift apart.
var queueCases = []struct {
	name string
	run  func(q *queueCase)
}{
	{"a free key goes to a waiter", func(q *queueCase) {
		q.want("turn", q.turn("", "A", 10, "a", false, false, testLease), "[0 1 0 0]")
		q.holder("after", "A")
		q.queued("after", 0)
	}},
	{"a held key queues the waiter", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.want("turn", q.turn("", "B", 20, "b", false, false, testLease), "[0 0 0 0]")
		q.holder("after", "X")
		q.queued("after", 1)
	}},
	{"a release reserves the key for the queue head; only the head takes it", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.turn("", "C", 30, "c", false, false, testLease)
		q.turn("", "B", 20, "b", false, false, testLease)
		q.want("release", q.release("X"), "1")
		q.holder("after release", reservePrefix+"b")
		q.want("later ticket", q.turn("", "C2", 30, "c", false, false, testLease), "[0 0 0 0]")
		q.want("newcomer", q.turn("", "D", 40, "d", false, false, testLease), "[0 0 0 0]")
		q.want("head", q.turn("", "B2", 20, "b", false, false, testLease), "[0 1 0 0]")
		q.holder("after head", "B2")
		q.queued("after head", 2)
	}},
	{"an earlier ticket goes ahead of queued later ones", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.turn("", "C", 30, "c", false, false, testLease)
		q.release("X")
		q.want("earlier", q.turn("", "E", 25, "e", false, false, testLease), "[0 1 0 0]")
		q.holder("after", "E")
	}},
	{"a release of another's key does nothing", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.want("release", q.release("Y"), "0")
		q.holder("after", "X")
	}},
	{"a hand-over relabels the key", func(q *queueCase) {
		q.turn("", "O", 1, "o", false, false, testLease)
		q.want("hand-over", q.turn("O", "N", 5, "n", false, false, testLease), "[1 1 0 0]")
		q.holder("after", "N")
	}},
	{"a hand-over behind a queued waiter releases to it", func(q *queueCase) {
		q.turn("", "O", 1, "o", false, false, testLease)
		q.turn("", "W", 5, "w", false, false, testLease)
		q.want("hand-over", q.turn("O", "N", 50, "n", false, false, testLease), "[1 0 0 0]")
		q.holder("after", reservePrefix+"w")
		q.queued("after", 2)
	}},
	{"a keep-mode hand-over jumps the queue and says so", func(q *queueCase) {
		q.turn("", "O", 1, "o", false, false, testLease)
		q.turn("", "W", 5, "w", false, false, testLease)
		q.want("hand-over", q.turn("O", "N", 50, "n", false, true, testLease), "[1 1 0 1]")
		q.holder("after", "N")
	}},
	{"a hand-over of a key taken by another does nothing", func(q *queueCase) {
		q.turn("", "Z", 1, "z", false, false, testLease)
		q.want("hand-over", q.turn("O", "N", 50, "n", false, true, testLease), "[0 0 0 0]")
		q.holder("after", "Z")
	}},
	{"fences grow by one per acquisition and hand-over", func(q *queueCase) {
		f1 := fenceOf(q, q.turn("", "A", 1, "a", true, false, testLease))
		f2 := fenceOf(q, q.turn("A", "B", 2, "b", true, false, testLease))
		q.release("B")
		f3 := fenceOf(q, q.turn("", "C", 3, "c", true, false, testLease))
		if f1 <= 0 || f2 != f1+1 || f3 != f2+1 {
			q.t.Fatalf("fences %d, %d, %d: want a seed then +1 each time", f1, f2, f3)
		}
	}},
	{"leaving passes a reservation on", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.turn("", "B", 20, "b", false, false, testLease)
		q.turn("", "C", 30, "c", false, false, testLease)
		q.release("X")
		q.want("leave head", q.leave("b"), "1")
		q.holder("after head left", reservePrefix+"c")
		q.want("leave last", q.leave("c"), "1")
		q.holder("after last left", "")
		q.queued("after last left", 0)
	}},
	{"a release or a hand-over writes its holder's record on every node, its key there or not (expired)", func(q *queueCase) {
		rec := &completionRecord{key: q.k.key + recordSuffix, window: time.Hour}
		release := func(token, id string) any {
			rec.id = id
			return q.evalArgs(queueReleaseScript, recordedArgs(queueReleaseScript, q.k.queueKeys()[:3], rec, token, testLease, q.k.channel))
		}
		turn := func(old, token string, ticket int64, id, recID string) any {
			rec.id = recID
			return q.evalArgs(turnScript, recordedArgs(turnScript, q.k.queueKeys(), rec, old, token, 60000, ticket, id, testLease, "0", 600000, q.k.channel, "1"))
		}
		q.acquire("X", 60000)
		q.want("not ours", release("Y", "y"), "0")
		q.want("ours", release("X", "x"), "1")
		q.acquire("X", 60000)
		q.turn("", "B", 20, "b", false, false, testLease)
		q.want("queued, ours", release("X", "x2"), "1")
		q.holder("after", reservePrefix+"b")
		q.want("the head takes its reservation", turn("", "B", 20, "b", "not-a-holder"), "[0 1 0 0]")
		q.want("hand-over from the head", turn("B", "C", 30, "c", "b"), "[1 1 0 0]")
		q.want("records", q.b.zcard(rec.key), "5")
	}},
	{"a lapsed waiter holds nobody back", func(q *queueCase) {
		q.turn("", "X", 1, "x", false, false, testLease)
		q.want("queue", q.turn("", "A", 5, "a", false, false, 20), "[0 0 0 0]")
		time.Sleep(200 * time.Millisecond) // well past the 20ms lease
		q.want("release", q.release("X"), "1")
		q.holder("after", "")
		q.want("newcomer", q.turn("", "D", 40, "d", false, false, testLease), "[0 1 0 0]")
	}},
}

func fenceOf(q *queueCase, v any) int64 {
	q.t.Helper()
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		q.t.Fatalf("turn answered %v", v)
	}
	f, _ := a[2].(int64)
	return f
}

// TestScriptsFakeMatchesRedis runs every lock and queue case on the
// in-memory node and on a redis-server (the real Lua).
func TestScriptsFakeMatchesRedis(t *testing.T) {
	backends := map[string]func(*testing.T) scriptBackend{
		"fake":  func(*testing.T) scriptBackend { return memBackend() },
		"redis": redisBackend,
	}
	for _, name := range []string{"fake", "redis"} {
		for i, tc := range slices.Concat(lockCases, queueCases) {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				c := &Client{cfg: defaultConfig()}
				tc.run(&queueCase{t: t, b: backends[name](t), k: c.keysFor(fmt.Sprintf("res%d", i))})
			})
		}
	}
}
