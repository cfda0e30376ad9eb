-- slot_turn (after slot_mark.lua, slot_fence.lua): turn.lua for one slot of a resource
-- used WithLimit(n), n > 1: a local hand-over (handover.go) passes the slot
-- from the old token to the new one in one step. The new token is set when
-- the slot's key is free or holds the old token, as SET NX would take it,
-- and the mark of the limits in use is kept at least as long as the slot
-- (slot_mark.lua). It does not ask the resource's waiter queue
-- (slot_queue.lua): nothing is queued, and the hand-over counts as passing
-- ahead of waiters of other processes (jumped), so that a chain of local
-- hand-overs is bounded as turn.lua's keep mode is (docs/design/HANDOVER.md).
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the resource's lock
-- key; KEYS[4] the old holder's completion record set, if its record is to
-- be written where the slot held the old token (record.lua)
-- ARGV[1] old token; ARGV[2] new token; ARGV[3] ttl in ms; ARGV[4] mark;
-- ARGV[5] '1' to fence; ARGV[6] counter retention in ms; ARGV[7] fence
-- classes;
-- ARGV[8] the slot's number; with KEYS[4]: ARGV[9] record id; ARGV[10]
-- window (scaled, record.lua)
-- Returns as turn.lua: {old released (0/1), new set (0/1), fence or 0, 1},
-- {0, 0, 0, 0} when another token holds the slot, and {0, 0, 0, 0,
-- 'nolimit'} when a plain lock holds the resource.
local cur = redis.call('GET', KEYS[1])
local mine = cur == ARGV[1]
if not mine and KEYS[4] then -- expired here, or taken: the work was kept by a majority
	record(KEYS[4], ARGV[9], ARGV[10])
end
local other = otherMark(KEYS[3])
if other then
	if mine and KEYS[4] then
		record(KEYS[4], ARGV[9], ARGV[10])
	end
	return {0, 0, 0, 0, other}
end
if cur and not mine then
	return {0, 0, 0, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
useMark(KEYS[3], ARGV[4], ARGV[3])
if mine and KEYS[4] then
	record(KEYS[4], ARGV[9], ARGV[10])
end
local f = 0
if ARGV[5] == '1' then
	f = slotFence(KEYS[2], ARGV[6], ARGV[7], ARGV[8])
end
return {mine and 1 or 0, 1, f, 1}
