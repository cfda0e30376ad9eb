-- slot_leave: take a waiter out of the slots' queue; the new head is told of a reserved slot.
-- KEYS as slot_release.lua, without a record set
-- ARGV[1] waiter id; ARGV[2] n; ARGV[3] channel
-- Returns 1.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
	redis.call('ZREM', KEYS[2], id)
	redis.call('ZREM', KEYS[3], id)
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local h = redis.call('ZRANGE', KEYS[2], 0, 0)[1] -- the new head is told of the first reserved slot
for i = 5, 4 + tonumber(ARGV[2]) do
	local v = redis.call('GET', KEYS[i])
	if v and string.sub(v, 1, 7) == 'queued:' then
		if h then
			redis.call('PUBLISH', ARGV[3], 'queued:' .. h .. '/' .. (i - 5))
			break
		end
		redis.call('DEL', KEYS[i]) -- nobody left queued: the slot need not wait for its lease
	end
end
return 1
