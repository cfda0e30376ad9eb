-- slot_acquire (after slot_mark.lua, slot_fence.lua): SET NX PX on one slot
-- of a resource used WithLimit(n), n > 1 (limit.go). The resource's own
-- lock key carries the mark of the limits in use (slot_mark.lua), at least
-- as long as any slot's key: a holder without a limit (its token there)
-- refuses the slot, and a mark refuses plain SET NX, so a plain lock and
-- slots never share the resource. Callers of different limits n > 1 share
-- the slots: slot i is one key whatever n, and a caller takes only slots
-- below its n. A fenced slot takes its fence from the resource's one
-- counter with slotFence.
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms;
-- ARGV[4] mark; ARGV[5] '1' to fence; ARGV[6] fence classes; ARGV[7] the
-- slot's number
-- Returns the fence (fenced) or 1 when set, or {that, the new mark} when
-- the set of limits in use changed; nil when the slot is taken; 'nolimit'
-- when a plain lock holds the resource.
local other = otherMark(KEYS[3])
if other then
	return other
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return false
end
local changed = useMark(KEYS[3], ARGV[4], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local r = 1
if ARGV[5] == '1' then
	r = slotFence(KEYS[2], ARGV[3], ARGV[6], ARGV[7])
end
if changed then
	return {r, changed}
end
return r
