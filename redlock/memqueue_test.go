package redlock

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// memZ is a sorted set of the in-memory node, with the key's expiry.
type memZ struct {
	m   map[string]float64
	exp time.Time
}

// zset returns a live sorted set, creating it when create is set.
func (m *memNode) zset(key string, create bool) *memZ {
	if m.zsets == nil {
		m.zsets = make(map[string]*memZ)
	}
	z := m.zsets[key]
	if z != nil && !z.exp.IsZero() && !time.Now().Before(z.exp) {
		delete(m.zsets, key)
		z = nil
	}
	if z == nil && create {
		z = &memZ{m: make(map[string]float64)}
		m.zsets[key] = z
	}
	return z
}

// zhead is the member with the lowest score (ties: the lowest member).
func (z *memZ) zhead() (string, float64, bool) {
	if z == nil || len(z.m) == 0 {
		return "", 0, false
	}
	ids := make([]string, 0, len(z.m))
	for id := range z.m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if z.m[a] != z.m[b] {
			if z.m[a] < z.m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ids[0], z.m[ids[0]], true
}

// memQueue runs the queue scripts (handover.go) against the in-memory node,
// step by step as their Lua does. Called with m.mu held.
type memQueue struct {
	m     *memNode
	keys  []string
	now   time.Time
	nowMs float64
	q, x  *memZ
}

func (m *memNode) queueOp(keys []string) *memQueue {
	now := time.Now()
	mq := &memQueue{m: m, keys: keys, now: now, nowMs: float64(now.UnixMicro() / 1000)}
	mq.q, mq.x = m.zset(keys[1], false), m.zset(keys[2], false)
	if mq.x != nil { // drop lapsed waiters
		for id, end := range mq.x.m {
			if end <= mq.nowMs {
				delete(mq.x.m, id)
				if mq.q != nil {
					delete(mq.q.m, id)
				}
			}
		}
	}
	return mq
}

func (mq *memQueue) enqueue(score, id string, lease int64) {
	q, x := mq.m.zset(mq.keys[1], true), mq.m.zset(mq.keys[2], true)
	s, _ := strconv.ParseFloat(score, 64)
	q.m[id] = s
	x.m[id] = mq.nowMs + float64(lease)
	exp := mq.now.Add(time.Duration(lease) * time.Millisecond)
	q.exp, x.exp = exp, exp
	mq.q, mq.x = q, x
}

func (mq *memQueue) dequeue(id string) {
	if mq.q != nil {
		delete(mq.q.m, id)
	}
	if mq.x != nil {
		delete(mq.x.m, id)
	}
}

func (mq *memQueue) free(lease int64) {
	mq.m.calls["publish"]++
	if h, _, ok := mq.q.zhead(); ok {
		mq.m.data[mq.keys[0]] = memEntry{val: reservePrefix + h, exp: mq.now.Add(time.Duration(lease) * time.Millisecond)}
		return
	}
	delete(mq.m.data, mq.keys[0])
}

// turn is turnScript.
func (mq *memQueue) turn(argv []any) []any {
	m, k := mq.m, mq.keys
	m.calls["turn"]++
	old, token, ttl, score, id, lease := str(argv[0]), str(argv[1]), num(argv[2]), str(argv[3]), str(argv[4]), num(argv[5])
	cur, held := m.getLocked(k[0])
	mine := held && old != "" && cur == old
	if !mine {
		mq.writeRecord(argv) // lua/turn.lua: on every node reached
	}
	if held && !mine && !strings.HasPrefix(cur, reservePrefix) {
		mq.enqueue(score, id, lease)
		return []any{int64(0), int64(0), int64(0), int64(0)}
	}
	s, _ := strconv.ParseFloat(score, 64)
	h, hs, ok := mq.q.zhead()
	first := !ok || h == id || hs > s || (hs == s && h > id)
	if first || (mine && str(argv[9]) == "1") {
		m.data[k[0]] = memEntry{val: token, exp: mq.now.Add(time.Duration(ttl) * time.Millisecond)}
		mq.dequeue(id)
		var f int64
		if str(argv[6]) == "1" {
			f = m.bumpFence(k[3], num(argv[7]), mq.now)
		}
		rel := int64(0)
		if mine {
			rel = 1
			mq.writeRecord(argv)
		}
		jumped := int64(1)
		if first {
			jumped = 0
		}
		return []any{rel, int64(1), f, jumped}
	}
	mq.enqueue(score, id, lease)
	if mine {
		mq.free(lease)
		mq.writeRecord(argv)
		return []any{int64(1), int64(0), int64(0), int64(0)}
	}
	return []any{int64(0), int64(0), int64(0), int64(0)}
}

// writeRecord writes the old holder's completion record of a turn, if it
// has one (lua/turn.lua's KEYS[5]).
func (mq *memQueue) writeRecord(argv []any) {
	if len(mq.keys) == 5 {
		mq.m.writeRecord(mq.keys[4], argv[10:])
	}
}

// bumpFence is the fence step of lua/turn.lua.
func (m *memNode) bumpFence(key string, retention int64, now time.Time) int64 {
	var f int64
	if v, ok := m.getLocked(key); ok {
		f = num(v) + 1
	} else {
		f = now.Add(m.clock).UnixMicro() // the node's own clock, as the Lua seeds it
	}
	m.data[key] = memEntry{val: strconv.FormatInt(f, 10), exp: now.Add(time.Duration(retention) * time.Millisecond)}
	return f
}

// execQueue runs one of the queue scripts; ok is false for other scripts.
func (m *memNode) execQueue(s *transport.Script, keys []string, argv []any) (val any, ok bool) {
	switch s {
	case turnScript:
		return m.queueOp(keys).turn(argv), true
	case queueReleaseScript:
		m.calls["release"]++
		mq := m.queueOp(keys)
		if v, held := m.getLocked(keys[0]); !held || v != str(argv[0]) {
			if len(keys) == 4 {
				m.writeRecord(keys[3], argv[3:]) // on every node reached
			}
			return int64(0), true
		}
		if mq.q == nil || len(mq.q.m) == 0 { // queue_release.lua, nobody queued: unannounced
			delete(m.data, keys[0])
		} else {
			mq.free(num(argv[1]))
		}
		if len(keys) == 4 {
			m.writeRecord(keys[3], argv[3:])
		}
		return int64(1), true
	case leaveQueueScript:
		m.calls["dequeue"]++
		mq := m.queueOp(keys)
		mq.dequeue(str(argv[0]))
		if v, held := m.getLocked(keys[0]); held && v == reservePrefix+str(argv[0]) {
			mq.free(num(argv[1]))
		}
		return int64(1), true
	}
	return nil, false
}
