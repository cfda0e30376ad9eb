-- slot_acquire: SET NX PX on one slot of a resource used WithLimit(n), n > 1
-- (limit.go). The resource's own lock key carries the limit's mark
-- ('limit:<n>'), at least as long as any slot's key: a holder without a
-- limit (its token there) or with another limit (another mark) refuses the
-- slot, and a mark refuses plain SET NX, so callers that disagree on n
-- never share the resource. With fencing, the resource's one counter is
-- bumped as fence_acquire.lua does (the fence step must match it).
-- KEYS[1] slot key; KEYS[2] the resource's lock key; KEYS[3] fencing counter
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] mark; ARGV[4] '1' to fence;
-- ARGV[5] counter retention in ms
-- Returns the fence (fenced) or 1 when set; nil when the slot is taken;
-- a string when the mark is not ARGV[3]: the other mark, or 'nolimit'.
local m = redis.call('GET', KEYS[2])
if m and m ~= ARGV[3] then
	if string.sub(m, 1, 6) == 'limit:' then
		return m
	end
	return 'nolimit'
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
	redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
if ARGV[4] ~= '1' then
	return 1
end
local c
if redis.call('EXISTS', KEYS[3]) == 1 then
	c = redis.call('INCR', KEYS[3])
	redis.call('PEXPIRE', KEYS[3], ARGV[5])
else
	local t = redis.call('TIME')
	c = t[1] .. string.format('%06d', tonumber(t[2]))
	redis.call('SET', KEYS[3], c, 'PX', ARGV[5])
end
return tonumber(c)
