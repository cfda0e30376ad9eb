-- fence_raise: raise the counter to the chosen fence, so that enough nodes
-- carry it (see fenceCopies). It needs no lock: a counter only ever grows,
-- and a higher counter only makes later fences larger.
-- KEYS[1] fencing counter key
-- ARGV[1] fence; ARGV[2] counter retention in ms
-- Returns 1.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
