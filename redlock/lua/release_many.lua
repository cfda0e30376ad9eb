-- release_many: a batch's releases in one call, each answering and acting as queue_release.lua's.
-- KEYS per release: its lock key, waiter queue and lease ends, then its record set if it writes one
-- ARGV[1] lease in ms; ARGV[2] per release 'r' (writes a record) or '-'; then per release its token,
-- and for an 'r' its record id and window. Each announces on <key>:released (Go's keys.channel).
-- Returns each release's answer, in order: 1, or 0 when the key was not ours.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local function release_queued(key, q, qx, token, lease)
	for _, id in ipairs(redis.call('ZRANGEBYSCORE', qx, '-inf', now)) do -- drop lapsed waiters
		redis.call('ZREM', q, id)
		redis.call('ZREM', qx, id)
	end
	if redis.call('GET', key) ~= token then
		return 0
	end
	local h = redis.call('ZRANGE', q, 0, 0)[1]
	if h then
		redis.call('SET', key, 'queued:' .. h, 'PX', lease)
	else
		redis.call('DEL', key)
	end
	redis.call('PUBLISH', key .. ':released', h and 'queued:' .. h or '1')
	return 1
end
local function record(key, id, window)
	window = tonumber(window)
	if window < 0 then
		redis.call('ZREM', key, id)
		return
	end
	local ms = now * 1024
	redis.call('ZREMRANGEBYSCORE', key, '-inf', ms + 1023)
	redis.call('ZADD', key, ms + window, id)
	if redis.call('PTTL', key) < math.floor(window / 1024) then
		redis.call('PEXPIRE', key, math.floor(window / 1024))
	end
end
local lease, flags, out = ARGV[1], ARGV[2], {}
local k, a = 0, 2
for i = 1, #flags do
	local key, q, token = KEYS[k + 1], KEYS[k + 2], ARGV[a + 1]
	if redis.call('EXISTS', q) == 1 then
		out[i] = release_queued(key, q, KEYS[k + 3], token, lease)
	elseif redis.call('GET', key) == token then -- nobody queued: inline, as in queue_release.lua
		redis.call('DEL', key)
		out[i] = 1
	else
		out[i] = 0
	end
	k, a = k + 3, a + 1
	if string.byte(flags, i) == 114 then -- 'r'
		record(KEYS[k + 1], ARGV[a + 1], ARGV[a + 2])
		k, a = k + 1, a + 2
	end
end
return out
