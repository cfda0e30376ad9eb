-- fence_acquire: SET NX PX, then take a fence: the counter plus one (a missing one seeded from TIME in µs).
-- KEYS[1] lock key, or slot key; KEYS[2] fencing counter
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms; for a slot, ARGV[4] fence classes
-- and ARGV[5] its number: the fence is then the least one up that is the slot modulo the classes
-- Returns the new fence, or nil when the key was taken.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return false
end
local c = redis.call('GET', KEYS[2])
local f
if c then
	f = tonumber(c) + 1
else
	local t = redis.call('TIME')
	f = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
end
if ARGV[4] then -- math.fmod is exact on these doubles, where Lua's % is not
	local n = tonumber(ARGV[4])
	f = f + math.fmod(tonumber(ARGV[5]) - math.fmod(f, n) + n, n)
end
redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
return f
