-- leave_queue: take a waiter that gave up out of the queue, passing on a reservation made for it.
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] lease ends
-- ARGV[1] waiter id; ARGV[2] lease in ms; ARGV[3] channel
-- Returns 1.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
	redis.call('ZREM', KEYS[2], id)
	redis.call('ZREM', KEYS[3], id)
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) ~= 'queued:' .. ARGV[1] then
	return 1
end
local h = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if h then
	redis.call('SET', KEYS[1], 'queued:' .. h, 'PX', ARGV[2])
else
	redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', ARGV[3], h and 'queued:' .. h or '1')
return 1
