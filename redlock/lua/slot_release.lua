-- slot_release (after slot_release_unqueued.lua, queue.lua,
-- slot_queue.lua): a release while waiters are queued reserves the slot
-- for the queue (any earliest live ticket takes it, slot_wait.lua) with
-- the lease as TTL, and tells the head (unless the channel is empty: an
-- undo wakes nobody).
-- KEYS and ARGV as slot_release_unqueued.lua
-- Returns as slot_release_unqueued.lua.
local sk = slotKey(ARGV[2])
local mine = redis.call('GET', sk) == ARGV[1]
if mine then
	local h = redis.call('ZRANGE', KEYS[2], 0, 0)
	if #h == 0 then -- every waiter lapsed
		redis.call('DEL', sk)
		settle(ARGV[3], '')
	else
		redis.call('SET', sk, 'queued:' .. h[1], 'PX', ARGV[4])
		if ARGV[5] ~= '' then
			redis.call('PUBLISH', ARGV[5], 'queued:' .. h[1] .. '/' .. ARGV[2])
		end
	end
end
if ARGV[6] then
	record(KEYS[#KEYS], ARGV[6], ARGV[7])
end
return mine and 1 or 0
