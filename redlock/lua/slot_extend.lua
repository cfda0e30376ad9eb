-- slot_extend (after slot_mark.lua, sent before extend.lua): for one slot
-- of a resource used WithLimit(n), keep the mark of the limits in use on
-- the resource's lock key at least as long as the slot (slot_mark.lua)
-- when the slot holds the token; extend.lua then extends the slot.
-- KEYS[1] slot key; KEYS[2] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] mark
-- Returns as extend.lua.
if redis.call('GET', KEYS[1]) == ARGV[1] and not otherMark(KEYS[2]) then
	useMark(KEYS[2], ARGV[3], ARGV[2])
end
