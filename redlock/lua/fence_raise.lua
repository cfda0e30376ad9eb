-- fence_raise: raise the counter to the chosen fence, so that enough nodes
-- carry it (see fenceCopies), and say what the node holds: a larger counter
-- is left as it is, and tells the caller that a larger fence may have been
-- handed out (a node that lost its data let another holder in) or that its
-- own round bumped this node higher, so it must fence again above it.
-- It needs no lock: a counter only ever grows, and a higher counter only
-- makes later fences larger.
-- KEYS[1] fencing counter key
-- ARGV[1] fence; ARGV[2] counter retention in ms
-- Returns the counter the node holds afterwards: the fence, or a larger one.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if cur > f then
	return cur
end
if cur < f then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return f
