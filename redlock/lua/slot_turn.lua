-- slot_turn (after record.lua, slot_fence.lua): turn.lua for one slot of a
-- resource used WithLimit(n), n > 1: a local hand-over (handover.go) passes
-- the slot from the old token to the new one in one step. The new token is
-- set when the slot's key is free or holds the old token, as SET NX would
-- take it. It does not ask the resource's waiter queue (slot_queue.lua):
-- the hand-over counts as passing ahead of waiters of other processes
-- (jumped), so that a chain of local hand-overs is bounded as turn.lua's
-- keep mode is (docs/design/HANDOVER.md).
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the old holder's
-- completion record set, if its record is to be written where the slot
-- held the old token (record.lua)
-- ARGV[1] old token; ARGV[2] new token; ARGV[3] ttl in ms; ARGV[4] '1' to
-- fence; ARGV[5] counter retention in ms; ARGV[6] fence classes; ARGV[7]
-- the slot's number; with KEYS[3]: ARGV[8] record id; ARGV[9] window
-- (scaled, record.lua)
-- Returns as turn.lua: {old released (0/1), new set (0/1), fence or 0, 1},
-- {0, 0, 0, 0} when another token holds the slot.
local cur = redis.call('GET', KEYS[1])
local mine = cur == ARGV[1]
if not mine and KEYS[3] then -- expired here, or taken: the work was kept by a majority
	record(KEYS[3], ARGV[8], ARGV[9])
end
if cur and not mine then
	return {0, 0, 0, 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if mine and KEYS[3] then
	record(KEYS[3], ARGV[8], ARGV[9])
end
local f = 0
if ARGV[4] == '1' then
	f = slotFence(KEYS[2], ARGV[5], ARGV[6], ARGV[7])
end
return {mine and 1 or 0, 1, f, 1}
