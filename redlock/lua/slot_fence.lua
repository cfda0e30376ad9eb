-- slot_fence: the prelude of slot_acquire.lua, slot_turn.lua and
-- slot_wait.lua. A slot of a resource used WithLimit(n) takes fences of its
-- own class: the least value above the resource's counter that is the
-- slot's number modulo MaxLimit (whatever n, so that holders of different
-- slots never share a fence, also while callers of two limits share the
-- slots; docs/design/REDLOCK.md, "Limits"); a missing counter is seeded from the
-- node's clock in microseconds, as fence_acquire.lua seeds it, then moved up
-- to the class.
-- Numbers are doubles: exact below 2^53, and math.fmod is exact where Lua's
-- % is not (at counters of today's clock).
-- KEYS: none of its own; slotFence is given the counter's key.
-- Returns nothing: slotFence(key, retention in ms, classes, slot) returns
-- the fence it set.
local function slotFence(key, retention, classes, slot)
	local f
	local c = redis.call('GET', key)
	if c then
		f = tonumber(c) + 1
	else
		local t = redis.call('TIME')
		f = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
	end
	local d = tonumber(slot) - math.fmod(f, tonumber(classes))
	if d < 0 then
		d = d + tonumber(classes)
	end
	f = f + d
	redis.call('SET', key, string.format('%.0f', f), 'PX', retention)
	return f
end
