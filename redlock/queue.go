package redlock

import (
	"crypto/rand"
	"strings"
	"time"
)

// The waiter queue keeps Acquire callers of different processes in FIFO
// order on every node; docs/HANDOVER.md explains the design and why it is
// safe. Each node has, per resource, a sorted set of waiters by ticket and a
// sorted set of their lease ends. A release hands the key to the queue head
// as a reservation (reservePrefix + waiter id, with the lease as TTL), which
// plain SET NX, i.e. newcomers, cannot take.

// reservePrefix starts a lock key's value while it is reserved for a queued
// waiter. Tokens (rand.Text) are upper case: they never start with it.
const reservePrefix = "queued:"

// ticket is an Acquire call's place in a resource's waiter queue: its start
// time in microseconds (the same on every node, so all nodes order the same
// waiters alike) and a random id that breaks ties and names its entries.
type ticket struct {
	score int64
	id    string
}

func newTicket() *ticket {
	return &ticket{score: time.Now().UnixMicro(), id: rand.Text()[:16]}
}

// queueKeys are the lock key, the waiter queue, the queue's lease ends and
// the fencing counter.
func (k keys) queueKeys() []string {
	return []string{k.key, k.key + ":q", k.key + ":qx", k.fenceKey}
}

// queueLease is how long a waiter's queue entry, or a reservation for it,
// lasts without being renewed: well above the longest gap between two
// attempts of a live waiter (a retry delay plus an attempt), so that only a
// waiter that is gone lets its entry lapse, and a dead waiter holds the
// others back for at most this long.
func (c *Client) queueLease() time.Duration {
	return max(500*time.Millisecond, 4*(c.cfg.retryMax+c.cfg.nodeTimeout))
}

// queueLua is the common part of the queue scripts: drop lapsed waiters,
// and helpers to queue a waiter and to free or reserve a released key.
// KEYS[1] lock, KEYS[2] queue (score: ticket), KEYS[3] lease ends (score:
// node time in ms).
const queueLua = `
local now
local function clock()
	if not now then
		local t = redis.call('TIME')
		now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	end
	return now
end
local queued = redis.call('EXISTS', KEYS[2]) == 1
if queued then
	local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', clock())
	if #gone > 0 then
		redis.call('ZREM', KEYS[2], unpack(gone))
		redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', clock())
	end
end
local function enqueue(score, id, lease)
	redis.call('ZADD', KEYS[2], score, id)
	redis.call('ZADD', KEYS[3], clock() + tonumber(lease), id)
	redis.call('PEXPIRE', KEYS[2], lease)
	redis.call('PEXPIRE', KEYS[3], lease)
end
local function dequeue(id)
	redis.call('ZREM', KEYS[2], id)
	redis.call('ZREM', KEYS[3], id)
end
local function free(lease, channel)
	local h = {}
	if queued then
		h = redis.call('ZRANGE', KEYS[2], 0, 0)
	end
	local msg = '1'
	if #h > 0 then
		msg = '` + reservePrefix + `' .. h[1]
		redis.call('SET', KEYS[1], msg, 'PX', lease)
	else
		redis.call('DEL', KEYS[1])
	end
	if channel ~= '' then
		redis.call('PUBLISH', channel, msg)
	end
end
`

// turnScript takes the lock for a queued waiter, and in the same step can
// release the previous holder's token (a hand-over). The new token is set
// when the key is free, reserved or the old token's, and no live waiter is
// queued ahead of the new one's ticket; otherwise the new one is queued and
// the old token, if it held the key, is released (reserved for the head). In
// keep mode a key that holds the old token always passes to the new one, so
// that a successor that started at once keeps it (it jumps the queue once).
// KEYS as queueLua plus KEYS[4] fencing counter. ARGV[1] old token (” for
// none), ARGV[2] new token, ARGV[3] ttl ms, ARGV[4] ticket, ARGV[5] waiter
// id, ARGV[6] lease ms, ARGV[7] '1' to bump the fence, ARGV[8] fence
// retention ms, ARGV[9] release channel, ARGV[10] '1' for keep mode.
// Returns {old released (0/1), new set (0/1), fence or 0, jumped (0/1)}.
var turnScript = newScript(queueLua + `
local cur = redis.call('GET', KEYS[1])
local mine = cur ~= false and ARGV[1] ~= '' and cur == ARGV[1]
if cur and not mine and string.sub(cur, 1, ` + reserveLen + `) ~= '` + reservePrefix + `' then
	enqueue(ARGV[4], ARGV[5], ARGV[6])
	return {0, 0, 0, 0}
end
local h = {}
if queued then
	h = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
end
local s = tonumber(ARGV[4])
local first = #h == 0 or h[1] == ARGV[5] or tonumber(h[2]) > s or (tonumber(h[2]) == s and h[1] > ARGV[5])
if first or (mine and ARGV[10] == '1') then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	dequeue(ARGV[5])
	local f = 0
	if ARGV[7] == '1' then
` + fenceBumpLua + `
	end
	return {mine and 1 or 0, 1, f, first and 0 or 1}
end
enqueue(ARGV[4], ARGV[5], ARGV[6])
if mine then
	free(ARGV[6], ARGV[9])
	return {1, 0, 0, 0}
end
return {0, 0, 0, 0}`)

// reserveLen is len(reservePrefix) as Lua source.
const reserveLen = "7"

// fenceBumpLua sets f to the next fence of KEYS[4]: the counter plus one, or
// a counter seeded from the node's clock in microseconds when it is
// missing. It must match fenceAcquireScript's counter step.
const fenceBumpLua = `
		if redis.call('EXISTS', KEYS[4]) == 1 then
			f = redis.call('INCR', KEYS[4])
			redis.call('PEXPIRE', KEYS[4], ARGV[8])
		else
			local t = redis.call('TIME')
			local c = t[1] .. string.format('%06d', tonumber(t[2]))
			redis.call('SET', KEYS[4], c, 'PX', ARGV[8])
			f = tonumber(c)
		end`

// queueReleaseScript deletes the lock key if it holds the token, or reserves
// it for the queue head when waiters are queued, and announces the release.
// KEYS as queueLua; ARGV[1] token, ARGV[2] lease ms, ARGV[3] channel.
// Returns 1, or 0 when the key was not ours.
var queueReleaseScript = newScript(queueLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
free(ARGV[2], ARGV[3])
return 1`)

// leaveQueueScript takes a waiter that gave up out of the queue, and passes
// on a reservation made for it.
// KEYS as queueLua; ARGV[1] waiter id, ARGV[2] lease ms, ARGV[3] channel.
// Returns 1.
var leaveQueueScript = newScript(queueLua + `
dequeue(ARGV[1])
if redis.call('GET', KEYS[1]) == '` + reservePrefix + `' .. ARGV[1] then
	free(ARGV[2], ARGV[3])
end
return 1`)

// forWaiter makes the watch ignore releases that reserve the key for
// another waiter: they publish the reservation, and only its waiter can take
// it, so waking the others would only cost them a refused round.
func (w *watch) forWaiter(id string) {
	w.n.mu.Lock()
	w.id = id
	w.n.mu.Unlock()
}

// wants reports whether a release announcement concerns the watch's waiter.
// Called with n.mu held.
func (w *watch) wants(payload string) bool {
	id, reserved := strings.CutPrefix(payload, reservePrefix)
	return !reserved || w.id == "" || id == w.id
}

// turnArgs builds turnScript's arguments.
func (c *Client) turnArgs(k keys, old, token string, ttl time.Duration, tk *ticket, lc *lockConfig, keep bool) []any {
	lease := c.queueLease().Milliseconds()
	return turnScript.args(k.queueKeys(), old, token, ttl.Milliseconds(), tk.score, tk.id, lease,
		flag(lc.fencing), c.cfg.fenceRetention.Milliseconds(), k.channel, flag(keep))
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// releaseArgs builds queueReleaseScript's arguments for a holder's release.
func (c *Client) releaseArgs(k keys, token string) []any {
	return queueReleaseScript.args(k.queueKeys()[:3], token, c.queueLease().Milliseconds(), k.channel)
}

// leaveQueue takes a waiter that gave up out of the queue on the nodes in
// mask, without waiting for the answers.
func (c *Client) leaveQueue(k keys, tk *ticket, mask uint64) {
	if mask == 0 || c.isClosed() {
		return
	}
	args := leaveQueueScript.args(k.queueKeys()[:3], tk.id, c.queueLease().Milliseconds(), k.channel)
	c.broadcast("dequeue", k.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, leaveQueueScript).idle()
}

// giveUp ends a waiter's wait: it leaves the nodes' queue and passes its
// local turn on.
func (c *Client) giveUp(k keys, tk *ticket, t *turn) {
	c.leaveQueue(k, tk, c.allNodes())
	t.leave()
}

// turnReply reads one node's turnScript answer.
func turnReply(v any) (released, set bool, fence int64) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return false, false, 0
	}
	r, _ := a[0].(int64)
	s, _ := a[1].(int64)
	f, _ := a[2].(int64)
	return r == 1, s == 1, f
}

// jumped reports whether a keep-mode hand-over passed the lock ahead of a
// waiter queued on any node that answered.
func (r *round) jumped() bool {
	for _, sl := range r.slots {
		if a, ok := sl.val.([]any); ok && len(a) == 4 {
			if j, _ := a[3].(int64); j == 1 {
				return true
			}
		}
	}
	return false
}

// classifyTurn counts a node that set the new token as OK.
func classifyTurn(rep reply) outcome {
	if rep.err != nil {
		return outFailed
	}
	if _, set, _ := turnReply(rep.val); set {
		return outOK
	}
	return outRefused
}
