-- fence_raise: raise the counter to the chosen fence, so that enough nodes
-- carry it (see fenceCopies), and say whether the node already carries a
-- larger one: then a larger fence may have been handed out (a node that
-- lost its data let another holder in), and the chosen one must not be.
-- It needs no lock: a counter only ever grows, and a higher counter only
-- makes later fences larger.
-- KEYS[1] fencing counter key
-- ARGV[1] fence; ARGV[2] counter retention in ms
-- Returns 1 when the counter now holds the fence, 0 when it held a larger one
-- (left as it is).
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if cur > f then
	return 0
end
if cur < f then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
