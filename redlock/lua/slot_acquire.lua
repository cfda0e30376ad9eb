-- slot_acquire (after slot_fence.lua): SET NX PX on one slot of a resource
-- used WithLimit(n), n > 1 (limit.go). The resource's own lock key carries the limit's mark
-- ('limit:<n>'), at least as long as any slot's key: a holder without a
-- limit (its token there) or with another limit (another mark) refuses the
-- slot, and a mark refuses plain SET NX, so callers that disagree on n never
-- share the resource. A fenced slot takes its fence from the resource's one
-- counter with slotFence.
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms;
-- ARGV[4] mark; ARGV[5] '1' to fence; ARGV[6] n; ARGV[7] the slot's number
-- Returns the fence (fenced) or 1 when set; nil when the slot is taken;
-- a string when the mark is not ARGV[4]: the other mark, or 'nolimit'.
local other = otherMark(KEYS[3], ARGV[4])
if other then
	return other
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return false
end
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then
	redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[5] ~= '1' then
	return 1
end
return slotFence(KEYS[2], ARGV[3], ARGV[6], ARGV[7])
