-- release_many_tail: the end of release_many (release_many_head.lua).
-- KEYS and ARGV as release_many_head.lua
-- Returns each release's answer, in order.
end
-- A release nobody queues for is release_unqueued.lua's compare-and-delete,
-- inline: no prelude, no tables, no function call (measured on one node,
-- 14 releases a call: 1.5-1.7µs a release against 2.0-2.2µs through a
-- release_one with six arguments each).
local lease, flags, out = ARGV[1], ARGV[2], {}
local k, a = 0, 2
for i = 1, #flags do
	local key, q, token = KEYS[k + 1], KEYS[k + 2], ARGV[a + 1]
	if redis.call('EXISTS', q) == 1 then
		out[i] = release_queued({key, q, KEYS[k + 3]}, {token, lease, key .. ':released'})
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
