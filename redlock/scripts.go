package redlock

import (
	"crypto/sha1"
	"encoding/hex"
)

// script is a Lua script sent as EVALSHA, falling back to EVAL when a node
// does not have it cached.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// args builds the EVALSHA arguments.
func (s *script) args(keys []string, argv ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, argv...)
}

// releaseScript deletes the lock key only if it holds our token and then
// announces the release to waiters (unless the channel is empty: undoing a
// failed attempt wakes nobody, or contenders would retry in lockstep).
// KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel (may be empty).
// Returns 1 if deleted, 0 if the key was not ours.
var releaseScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	if ARGV[2] ~= '' then
		redis.call('PUBLISH', ARGV[2], '1')
	end
	return 1
end
return 0`)

// extendScript sets the TTL to at least the new one, only if the key still
// holds our token: an expired or stolen lock is never re-created, and a key
// is never shortened (a shorter extension that fails to reach a quorum must
// not cut the keys under the validity the holder still counts on).
// KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms. Returns 1 or 0.
var extendScript = newScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1`)

// fenceAcquireScript is SET NX PX plus a fencing counter. On success it bumps
// the resource's counter (seeding a missing one from the node's clock in
// microseconds, so a counter that expired or was lost restarts above every
// earlier value) and returns it; otherwise nil.
// KEYS[1] lock key, KEYS[2] counter key; ARGV[1] token, ARGV[2] ttl ms,
// ARGV[3] counter retention ms.
var fenceAcquireScript = newScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
local c
if redis.call('EXISTS', KEYS[2]) == 1 then
	c = redis.call('INCR', KEYS[2])
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
else
	local t = redis.call('TIME')
	c = t[1] .. string.format('%06d', tonumber(t[2]))
	redis.call('SET', KEYS[2], c, 'PX', ARGV[3])
end
return tonumber(c)`)

// fenceRaiseScript raises the counter to the chosen fence, so that enough
// nodes carry it (see fenceCopies). It needs no lock: a counter only ever
// grows, and a higher counter only makes later fences larger.
// KEYS[1] counter key; ARGV[1] fence, ARGV[2] retention ms. Returns 1.
var fenceRaiseScript = newScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1`)

// inspectScript reads a resource's state atomically: holder token (or nil),
// remaining TTL in ms (-2 if absent), fencing counter (or nil).
var inspectScript = newScript(`
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}`)

// allScripts are loaded on a node before its first script call.
var allScripts = []*script{releaseScript, extendScript, fenceAcquireScript, fenceRaiseScript, inspectScript, turnScript, queueReleaseScript, leaveQueueScript}
