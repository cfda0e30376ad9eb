-- queue: the prelude of the waiter-queue scripts (turn, leave_queue and the
-- slot queue's), which are sent as this file followed by their own. It drops
-- lapsed waiters and defines helpers to queue a waiter and to free or
-- reserve a released key. A reservation is the lock value 'queued:' (Go's
-- reservePrefix) followed by the waiter id; docs/design/HANDOVER.md has the design.
-- KEYS[1] lock key; KEYS[2] waiter queue (score: ticket); KEYS[3] lease
-- ends (score: node time in ms)
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
		msg = 'queued:' .. h[1]
		redis.call('SET', KEYS[1], msg, 'PX', lease)
	else
		redis.call('DEL', KEYS[1])
	end
	if channel ~= '' then
		redis.call('PUBLISH', channel, msg)
	end
end
