-- release_many_tail: the end of release_many (release_many_head.lua).
-- KEYS and ARGV as release_many_head.lua
-- Returns each release's answer, in order.
end
-- A release nobody queues for is release_unqueued.lua's compare-and-delete,
-- inline: no prelude, no tables, no function call (measured on one node,
-- 14 releases a call: 1.5-1.7µs a release against 2.0-2.2µs through a
-- release_one with six arguments each).
local lease, out = ARGV[#ARGV], {}
for i = 1, #KEYS / 3 do
	local key, q = KEYS[3 * i - 2], KEYS[3 * i - 1]
	if redis.call('EXISTS', q) == 1 then
		out[i] = release_queued({key, q, KEYS[3 * i]}, {ARGV[i], lease, key .. ':released'})
	elseif redis.call('GET', key) == ARGV[i] then
		redis.call('DEL', key)
		out[i] = 1
	else
		out[i] = 0
	end
end
return out
