-- release_many (after record.lua): the releases of one batch in one script
-- call; each answers and acts exactly as queue_release does (one call
-- instead of one per release saves the script set-up on the node, and the
-- arguments a release does not need per release, the lease and the
-- channel, are not sent per release).
-- KEYS: per release, in order, its lock key, waiter queue and lease ends
-- (queue.lua), followed by its completion record set if it writes one
-- (record.lua)
-- ARGV[1] the lease in ms (one for all); ARGV[2] one character per release,
-- in order: 'r' for one that writes a record, '-' for one that does not;
-- then per release its token, followed for one that writes a record by the
-- record id and the window (scaled, record.lua). Each release announces on
-- its key's channel, <key>:released (Go's keys.channel).
-- Returns each release's answer, in order: 1, or 0 when the key was not
-- ours.
local now -- the node's clock in ms, read at the first queued release
-- release_queued is queue.lua's prelude and queue_release.lua for one
-- release whose waiter queue exists: lapsed waiters dropped, then the key
-- reserved for the head (or deleted) and the release announced.
local function release_queued(key, q, qx, token, lease)
	if not now then
		local t = redis.call('TIME')
		now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	end
	local gone = redis.call('ZRANGEBYSCORE', qx, '-inf', now)
	if #gone > 0 then
		redis.call('ZREM', q, unpack(gone))
		redis.call('ZREMRANGEBYSCORE', qx, '-inf', now)
	end
	if redis.call('GET', key) ~= token then
		return 0
	end
	local h = redis.call('ZRANGE', q, 0, 0)
	local msg = '1'
	if #h > 0 then
		msg = 'queued:' .. h[1]
		redis.call('SET', key, msg, 'PX', lease)
	else
		redis.call('DEL', key)
	end
	redis.call('PUBLISH', key .. ':released', msg)
	return 1
end
-- A release nobody queues for is queue_release.lua's compare-and-delete,
-- inline: no prelude, no tables, no function call (measured on one node,
-- 14 releases a call: 1.5-1.7µs a release against 2.0-2.2µs through a
-- release_one with six arguments each).
local lease, flags, out = ARGV[1], ARGV[2], {}
local k, a = 0, 2
for i = 1, #flags do
	local key, q, token = KEYS[k + 1], KEYS[k + 2], ARGV[a + 1]
	if redis.call('EXISTS', q) == 1 then
		out[i] = release_queued(key, q, KEYS[k + 3], token, lease)
	elseif redis.call('GET', key) == token then
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
