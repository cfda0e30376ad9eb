package redlock

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// acquire sends the plain acquisition: SET NX PX.
func (q *queueCase) acquire(token string, ttlMs int64) any {
	return q.b.do("set", q.k.key, token, "nx", "px", ttlMs)
}

func (q *queueCase) unlock(token string) any {
	return q.b.eval(releaseScript, q.k.lockKeys(), token, q.k.channel)
}

func (q *queueCase) extend(token string, ttlMs int64) any {
	return q.b.eval(extendScript, q.k.lockKeys(), token, ttlMs)
}

func (q *queueCase) fenced(token string, ttlMs int64) any {
	return q.b.eval(fenceAcquireScript, []string{q.k.key, q.k.fenceKey}, token, ttlMs, 600000)
}

func (q *queueCase) raise(fence int64) any {
	return q.b.eval(fenceRaiseScript, []string{q.k.fenceKey}, fence, 600000)
}

// ttlIn checks the lock key's remaining TTL.
func (q *queueCase) ttlIn(step string, lo, hi int64) {
	q.t.Helper()
	if ms := q.b.pttl(q.k.key); ms < lo || ms > hi {
		q.t.Fatalf("%s: TTL %dms, want [%d, %d]", step, ms, lo, hi)
	}
}

// seeded checks that a fence seeded from the node's clock is near now in
// microseconds.
func (q *queueCase) seeded(step string, v any) int64 {
	q.t.Helper()
	f, ok := v.(int64)
	if now := time.Now().UnixMicro(); !ok || f < now-int64(time.Hour/time.Microsecond) || f > now+int64(time.Hour/time.Microsecond) {
		q.t.Fatalf("%s: fence %v, want the node's clock in µs (about %d)", step, v, now)
	}
	return f
}

// lockCases are the acquire, release, extend, fence and inspect scripts'
// behaviours, run alike on the in-memory fake and on a redis-server.
var lockCases = []struct {
	name string
	run  func(q *queueCase)
}{
	{"SET NX PX takes a free key and refuses a held one", func(q *queueCase) {
		q.want("first", q.acquire("A", 60000), "OK")
		q.want("second", q.acquire("B", 60000), "redis: nil")
		q.holder("after", "A")
		q.ttlIn("after", 50000, 60000)
	}},
	{"release deletes only its own token", func(q *queueCase) {
		q.acquire("A", 60000)
		q.want("another token", q.unlock("B"), "0")
		q.holder("after another token", "A")
		q.want("own token", q.unlock("A"), "1")
		q.holder("after own token", "")
		q.want("again", q.unlock("A"), "0")
	}},
	{"extend needs the token and never shortens the key", func(q *queueCase) {
		q.acquire("A", 60000)
		q.want("another token", q.extend("B", 120000), "0")
		q.ttlIn("after another token", 50000, 60000)
		q.want("shorter", q.extend("A", 1000), "1")
		q.ttlIn("after shorter", 50000, 60000)
		q.want("longer", q.extend("A", 120000), "1")
		q.ttlIn("after longer", 110000, 120000)
	}},
	{"extend never re-creates an expired key", func(q *queueCase) {
		q.want("free key", q.extend("A", 60000), "0")
		q.holder("after", "")
	}},
	{"a fenced acquire seeds the counter from the clock, then adds one", func(q *queueCase) {
		f1 := q.seeded("first", q.fenced("A", 60000))
		q.want("held", q.fenced("B", 60000), "redis: nil")
		q.unlock("A")
		q.want("second", q.fenced("C", 60000), fmt.Sprint(f1+1))
		q.holder("after", "C")
	}},
	{"raising a counter never lowers it, and says so", func(q *queueCase) {
		q.want("raise", q.raise(100), "100")
		q.want("counter", q.b.get(q.k.fenceKey), "100")
		q.want("equal", q.raise(100), "100")
		q.want("lower", q.raise(50), "100")
		q.want("counter after lower", q.b.get(q.k.fenceKey), "100")
		q.want("fenced", q.fenced("A", 60000), "101")
	}},
	{"inspect reads token, TTL and counter", func(q *queueCase) {
		q.want("free", q.b.eval(inspectScript, q.k.bothKeys()), "[<nil> -2 <nil>]")
		q.raise(7)
		q.fenced("A", 60000)
		v, _ := q.b.eval(inspectScript, q.k.bothKeys()).([]any)
		if len(v) != 3 || v[0] != "A" || v[2] != "8" {
			q.t.Fatalf("inspect answered %v, want [A <ttl> 8]", v)
		}
		if ms, _ := v[1].(int64); ms < 50000 || ms > 60000 {
			q.t.Fatalf("inspect TTL %v, want about 60000", v[1])
		}
	}},
}

// TestScriptFilesStateTheirContract: every embedded script opens with a
// header naming it and its KEYS, and says what it returns.
func TestScriptFilesStateTheirContract(t *testing.T) {
	files, err := luaFiles.ReadDir("lua")
	if err != nil || len(files) < 9 {
		t.Fatalf("embedded scripts: %d files, %v", len(files), err)
	}
	for _, f := range files {
		b, _ := luaFiles.ReadFile("lua/" + f.Name())
		src, name := string(b), strings.TrimSuffix(f.Name(), ".lua")
		head, _, _ := strings.Cut(src, "\n")
		if !strings.HasPrefix(head, "-- "+name+" ") && !strings.HasPrefix(head, "-- "+name+":") {
			t.Errorf("%s: first line %q does not name the script", f.Name(), head)
		}
		if !strings.Contains(src, "-- KEYS") || !strings.Contains(src, "-- Returns") {
			t.Errorf("%s: header misses its KEYS or its return values", f.Name())
		}
	}
}
