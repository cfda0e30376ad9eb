-- slot_acquire: SET NX PX on one slot of a resource used WithLimit(n),
-- n > 1 (limit.go). The resource's own lock key carries the limit's mark
-- ('limit:<n>'), at least as long as any slot's key: a holder without a
-- limit (its token there) or with another limit (another mark) refuses the
-- slot, and a mark refuses plain SET NX, so callers that disagree on n never
-- share the resource. A fenced slot bumps the resource's one counter to the
-- least value above it that is the slot's number modulo n, so that holders
-- of different slots never share a fence (docs/REDLOCK.md, "Limits"); a
-- missing counter is seeded from the node's clock as fence_acquire.lua does.
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the resource's lock key
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms;
-- ARGV[4] mark; ARGV[5] '1' to fence; ARGV[6] n; ARGV[7] the slot's number
-- Returns the fence (fenced) or 1 when set; nil when the slot is taken;
-- a string when the mark is not ARGV[4]: the other mark, or 'nolimit'.
local m = redis.call('GET', KEYS[3])
if m and m ~= ARGV[4] then
	if string.sub(m, 1, 6) == 'limit:' then
		return m
	end
	return 'nolimit'
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return false
end
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then
	redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[5] ~= '1' then
	return 1
end
local f
local c = redis.call('GET', KEYS[2])
if c then
	f = tonumber(c) + 1
else
	local t = redis.call('TIME')
	f = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
end
-- math.fmod is exact on doubles (Lua's % is not, at 2^50).
local d = tonumber(ARGV[7]) - math.fmod(f, tonumber(ARGV[6]))
if d < 0 then
	d = d + tonumber(ARGV[6])
end
f = f + d
redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
return f
