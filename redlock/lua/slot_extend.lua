-- slot_extend: extend.lua for one slot of a resource used WithLimit(n),
-- which also keeps the limit's mark on the resource's lock key at least as
-- long as the slot (see slot_acquire.lua).
-- KEYS[1] slot key; KEYS[2] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] mark
-- Returns 1 if the slot holds the token (extended or already long enough), 0 if not.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local m = redis.call('GET', KEYS[2])
if (not m or m == ARGV[3]) and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
	redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
return 1
