-- slot_wait (after slot_fence.lua, queue.lua, slot_queue.lua): a queued
-- waiter's round on one slot (turn.lua for slots). The slot is taken only
-- when it is free or reserved and no live waiter with an earlier ticket is
-- queued on this node; otherwise the waiter is queued (or renewed). The
-- slot is still set only where SET NX would set it or a reservation
-- stands: the queue only adds refusals.
-- KEYS as slot_queue.lua
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms;
-- ARGV[4] n; ARGV[5] '1' to fence; ARGV[6] fence classes; ARGV[7] the
-- slot's number; ARGV[8] ticket; ARGV[9] waiter id; ARGV[10] lease in ms;
-- ARGV[11] release channel
-- Returns the fence (fenced) or 1 when set, nil when refused.
local sk = slotKey(ARGV[7])
local cur = redis.call('GET', sk)
local first = false
if not cur or string.sub(cur, 1, 7) == 'queued:' then
	local h = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
	local s = tonumber(ARGV[8])
	first = #h == 0 or h[1] == ARGV[9] or tonumber(h[2]) > s or (tonumber(h[2]) == s and h[1] > ARGV[9])
end
if not first then
	enqueue(ARGV[8], ARGV[9], ARGV[10])
	return false
end
redis.call('SET', sk, ARGV[1], 'PX', ARGV[2])
dequeue(ARGV[9])
settle(ARGV[4], ARGV[11])
if ARGV[5] == '1' then
	return slotFence(KEYS[4], ARGV[3], ARGV[6], ARGV[7])
end
return 1
