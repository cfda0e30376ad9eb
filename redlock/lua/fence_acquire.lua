-- fence_acquire: SET NX PX, then bump the fencing counter (a missing one seeded from TIME in µs).
-- KEYS[1] lock key; KEYS[2] fencing counter
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms
-- Returns the new fence, or nil when the key was taken.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
local c
if redis.call('EXISTS', KEYS[2]) == 1 then
	c = redis.call('INCR', KEYS[2])
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
else
	local t = redis.call('TIME')
	c = t[1] .. string.format('%06d', tonumber(t[2]))
	redis.call('SET', KEYS[2], c, 'PX', ARGV[3])
end
return tonumber(c)
