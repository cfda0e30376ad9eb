-- slot_acquire: SET NX PX on one slot of a resource used WithLimit(n > 1) and WithFencing.
-- KEYS[1] slot key; KEYS[2] fencing counter
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms; ARGV[4] fence classes; ARGV[5] slot
-- Returns the fence (the least above the counter that is the slot modulo the classes), nil when taken.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
local c = redis.call('GET', KEYS[2])
local f
if c then
	f = tonumber(c) + 1
else -- seeded as fence_acquire.lua seeds it
	local t = redis.call('TIME')
	f = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
end
local n = tonumber(ARGV[4]) -- math.fmod is exact on these doubles, where Lua's % is not
f = f + math.fmod(tonumber(ARGV[5]) - math.fmod(f, n) + n, n)
redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
return f
