-- queue_release: a holder's release; with waiters queued, the key is reserved for the queue's head.
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] lease ends; KEYS[4] record set (if one is written)
-- ARGV[1] token; ARGV[2] lease in ms; ARGV[3] channel; ARGV[4] record id; ARGV[5] window
-- Returns 1, or 0 when the key was not ours.
local mine = redis.call('GET', KEYS[1]) == ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 0 then -- nobody queued: unannounced compare-and-delete
	if mine then
		redis.call('DEL', KEYS[1])
	end
else
	local t = redis.call('TIME')
	local now = t[1] * 1000 + math.floor(t[2] / 1000)
	for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
		redis.call('ZREM', KEYS[2], id)
		redis.call('ZREM', KEYS[3], id)
	end
	if mine then
		local h = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
		if h then
			redis.call('SET', KEYS[1], 'queued:' .. h, 'PX', ARGV[2])
		else
			redis.call('DEL', KEYS[1])
		end
		redis.call('PUBLISH', ARGV[3], h and 'queued:' .. h or '1')
	end
end
if KEYS[4] and tonumber(ARGV[5]) < 0 then -- the holder's completion record, scored in ms * 1024 (-1: delete it)
	redis.call('ZREM', KEYS[4], ARGV[4])
elseif KEYS[4] then
	local t = redis.call('TIME')
	local ms = (t[1] * 1000 + math.floor(t[2] / 1000)) * 1024
	redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms + 1023)
	redis.call('ZADD', KEYS[4], ms + ARGV[5], ARGV[4])
	if redis.call('PTTL', KEYS[4]) < math.floor(ARGV[5] / 1024) then
		redis.call('PEXPIRE', KEYS[4], math.floor(ARGV[5] / 1024))
	end
end
return mine and 1 or 0
