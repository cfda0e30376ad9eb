-- slot_extend (sent before extend.lua): for one slot of a resource used
-- WithLimit(n), keep the limit's mark on the resource's lock key at least
-- as long as the slot (see slot_acquire.lua) when the slot holds the token;
-- extend.lua then extends the slot.
-- KEYS[1] slot key; KEYS[2] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] mark
-- Returns as extend.lua.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	local m = redis.call('GET', KEYS[2])
	if (not m or m == ARGV[3]) and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
		redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
	end
end
