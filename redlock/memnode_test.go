package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// memNode is an in-memory stand-in for one Redis master that understands the
// commands and scripts this package sends. Time is the test's clock, so under
// testing/synctest expiry and delays are virtual and exact.
type memNode struct {
	mu    sync.Mutex
	data  map[string]memEntry
	err   error         // when set, every call fails with it
	hang  bool          // when set, calls fail after memReadTimeout
	delay time.Duration // processing delay before a call takes effect
	clock time.Duration // the node's wall clock minus the test's (fence seeds)
	calls map[string]int
	zsets map[string]*memZ // sorted sets (memqueue_test.go)
	// batches counts the pipelines run (do calls).
	batches int
}

type memEntry struct {
	val string
	exp time.Time // zero: no expiry
}

var errMemDown = errors.New("connection refused")

// memReadTimeout is how long a hung in-memory node keeps a call, like a
// client's read timeout.
const memReadTimeout = 200 * time.Millisecond

var errMemTimeout = errors.New("i/o timeout")

func newMemNode() *memNode {
	return &memNode{data: make(map[string]memEntry), calls: make(map[string]int)}
}

func (m *memNode) set(f func(m *memNode)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// get returns a live key's value.
func (m *memNode) get(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.getLocked(key)
}

func (m *memNode) getLocked(key string) (string, bool) {
	e, ok := m.data[key]
	if !ok {
		return "", false
	}
	if !e.exp.IsZero() && !time.Now().Before(e.exp) {
		delete(m.data, key)
		return "", false
	}
	return e.val, true
}

func (m *memNode) count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

func (m *memNode) do(ctx context.Context, cmds []*redis.Cmd) {
	m.mu.Lock()
	m.batches++
	err, hang, delay := m.err, m.hang, m.delay
	m.mu.Unlock()
	if hang {
		// A stuck node: the client's read timeout ends the call.
		time.Sleep(memReadTimeout)
		for _, c := range cmds {
			c.SetErr(errMemTimeout)
		}
		return
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	for _, c := range cmds {
		if err != nil {
			c.SetErr(err)
			continue
		}
		m.exec(c)
	}
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

func num(v any) int64 {
	n, err := strconv.ParseInt(str(v), 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

func (m *memNode) exec(c *redis.Cmd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := c.Args()
	op := strings.ToLower(str(a[0]))
	if op == "script" {
		for _, s := range transportEnv.Scripts {
			if str(a[2]) == s.Src {
				c.SetVal(s.SHA)
				return
			}
		}
		c.SetErr(errors.New("ERR unknown script"))
		return
	}
	if op == "ping" {
		c.SetVal("PONG")
		return
	}
	if op == "time" {
		us := time.Now().UnixMicro()
		c.SetVal([]any{strconv.FormatInt(us/1e6, 10), strconv.FormatInt(us%1e6, 10)})
		return
	}
	if m.execRecord(op, a, c) {
		return
	}
	if op == "set" {
		m.calls["set"]++
		key := str(a[1])
		if _, ok := m.getLocked(key); ok {
			c.SetErr(redis.Nil)
			return
		}
		m.data[key] = memEntry{val: str(a[2]), exp: time.Now().Add(time.Duration(num(a[5])) * time.Millisecond)}
		c.SetVal("OK")
		return
	}
	// evalsha / eval
	var s *transport.Script
	for _, cand := range transportEnv.Scripts {
		if str(a[1]) == cand.SHA || str(a[1]) == cand.Src {
			s = cand
		}
	}
	nk := int(num(a[2]))
	keys := make([]string, nk)
	for i := range keys {
		keys[i] = str(a[3+i])
	}
	argv := a[3+nk:]
	now := time.Now()
	if v, ok := m.execQueue(s, keys, argv); ok {
		c.SetVal(v)
		return
	}
	switch s {
	case releaseScript:
		m.calls["release"]++
		if v, ok := m.getLocked(keys[0]); ok && v == str(argv[0]) {
			delete(m.data, keys[0])
			c.SetVal(int64(1))
			return
		}
		c.SetVal(int64(0))
	case extendScript:
		m.calls["extend"]++
		if v, ok := m.getLocked(keys[0]); ok && v == str(argv[0]) {
			exp := now.Add(time.Duration(num(argv[1])) * time.Millisecond)
			if cur := m.data[keys[0]].exp; cur.After(exp) {
				exp = cur // never shortened
			}
			m.data[keys[0]] = memEntry{val: v, exp: exp}
			c.SetVal(int64(1))
			return
		}
		c.SetVal(int64(0))
	case fenceAcquireScript:
		m.calls["set"]++
		if _, ok := m.getLocked(keys[0]); ok {
			c.SetErr(redis.Nil)
			return
		}
		m.data[keys[0]] = memEntry{val: str(argv[0]), exp: now.Add(time.Duration(num(argv[1])) * time.Millisecond)}
		var f int64
		if v, ok := m.getLocked(keys[1]); ok {
			f = num(v) + 1
		} else {
			f = now.Add(m.clock).UnixMicro()
		}
		m.data[keys[1]] = memEntry{val: strconv.FormatInt(f, 10), exp: now.Add(time.Duration(num(argv[2])) * time.Millisecond)}
		c.SetVal(f)
	case fenceRaiseScript:
		m.calls["fence"]++
		cur := int64(0)
		if v, ok := m.getLocked(keys[0]); ok {
			cur = num(v)
		}
		switch {
		case cur > num(argv[0]):
			c.SetVal(cur)
			return
		case cur < num(argv[0]):
			m.data[keys[0]] = memEntry{val: str(argv[0]), exp: now.Add(time.Duration(num(argv[1])) * time.Millisecond)}
		}
		c.SetVal(num(argv[0]))
	case inspectScript:
		var tok, fence any
		pttl := int64(-2)
		if v, ok := m.getLocked(keys[0]); ok {
			tok = v
			pttl = m.data[keys[0]].exp.Sub(now).Milliseconds()
		}
		if v, ok := m.getLocked(keys[1]); ok {
			fence = v
		}
		c.SetVal([]any{tok, pttl, fence})
	default:
		c.SetErr(errors.New("NOSCRIPT unknown script"))
	}
}

// memClient builds a Client over n in-memory nodes. Call it inside the
// synctest bubble when the test uses virtual time; the Client is closed at
// the end of the test.
func memClient(t testing.TB, n int, opts ...Option) (*Client, []*memNode) {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	mems := make([]*memNode, n)
	nodes := make([]*transport.Node, n)
	for i := range mems {
		mems[i] = newMemNode()
		nodes[i] = transport.NewNode(i, fmt.Sprintf("mem%d", i), nil, transportEnv)
		nodes[i].Do = mems[i].do
	}
	c := start(cfg, nodes, nil)
	t.Cleanup(func() { _ = c.Close() })
	return c, mems
}

// holders counts the nodes whose lock key for resource holds token.
func holders(c *Client, mems []*memNode, resource, token string) int {
	k := c.keysFor(resource)
	n := 0
	for _, m := range mems {
		if v, ok := m.get(k.key); ok && v == token {
			n++
		}
	}
	return n
}

// execRecord runs the look-up of completion records (sorted sets): ZSCORE
// key member (the writes are part of the release scripts, writeRecord). It
// reports whether op was one of them.
func (m *memNode) execRecord(op string, a []any, c *redis.Cmd) bool {
	switch op {
	case "zscore":
		z := m.zset(str(a[1]), false)
		if z == nil {
			c.SetErr(redis.Nil)
			return true
		}
		v, ok := z.m[str(a[2])]
		if !ok {
			c.SetErr(redis.Nil)
			return true
		}
		c.SetVal(strconv.FormatFloat(v, 'f', -1, 64))
	default:
		return false
	}
	return true
}

// writeRecord is the release scripts' write of a completion record
// (lua/queue_release.lua), given the record's set and its arguments (id,
// window, scaled as the scripts'), on the node's clock.
func (m *memNode) writeRecord(key string, argv []any) {
	m.calls["record"]++
	z := m.zset(key, true)
	window, now := num(argv[1]), time.Now().UnixMilli()*runScale
	if window < 0 {
		delete(z.m, str(argv[0]))
		return
	}
	for k, v := range z.m {
		if v <= float64(now+runScale-1) {
			delete(z.m, k)
		}
	}
	z.m[str(argv[0])] = float64(now + window)
	if exp := time.Now().Add(time.Duration(window/runScale) * time.Millisecond); exp.After(z.exp) {
		z.exp = exp
	}
}
