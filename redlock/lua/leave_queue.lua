-- leave_queue: take a waiter that gave up out of the queue, passing on a reservation made for it.
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] lease ends
-- ARGV[1] waiter id; ARGV[2] lease in ms; ARGV[3] channel
-- Returns 1.
local queued = redis.call('EXISTS', KEYS[2]) == 1
if queued then -- drop lapsed waiters
	local t = redis.call('TIME')
	local now = t[1] * 1000 + math.floor(t[2] / 1000)
	local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
	if #gone > 0 then
		redis.call('ZREM', KEYS[2], unpack(gone))
		redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
	end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) ~= 'queued:' .. ARGV[1] then
	return 1
end
local h = {}
if queued then
	h = redis.call('ZRANGE', KEYS[2], 0, 0)
end
local msg = '1'
if #h > 0 then
	msg = 'queued:' .. h[1]
	redis.call('SET', KEYS[1], msg, 'PX', ARGV[2])
else
	redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', ARGV[3], msg)
return 1
