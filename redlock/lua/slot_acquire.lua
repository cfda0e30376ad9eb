-- slot_acquire (after slot_fence.lua): SET NX PX on one slot of a resource
-- used WithLimit(n), n > 1, with WithFencing (limit.go; an unfenced slot
-- round is a plain SET NX PX). Slot 0 is the resource's own lock key, slot
-- i > 0 its key beside it, and a caller of n takes only slots below n, so
-- callers of any limits share the slots (docs/design/REDLOCK.md, "Limits").
-- KEYS[1] slot key; KEYS[2] fencing counter
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms;
-- ARGV[4] fence classes; ARGV[5] the slot's number
-- Returns the fence when set, nil when the slot is taken.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
return slotFence(KEYS[2], ARGV[3], ARGV[4], ARGV[5])
