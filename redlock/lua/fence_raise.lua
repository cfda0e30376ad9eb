-- fence_raise: raise the fencing counter to the fence; a larger counter is left as it is.
-- KEYS[1] fencing counter
-- ARGV[1] fence; ARGV[2] counter retention in ms
-- Returns the counter the node holds afterwards: the fence, or a larger one.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if cur < f then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return math.max(cur, f)
