-- slot_queue (after slot_mark.lua, queue.lua): the waiter queue of a resource used
-- WithLimit(n), n > 1, shared by its slots (slot_wait, slot_release,
-- slot_leave). A released slot is reserved for the queue, not for one
-- waiter: any free or reserved slot goes to the earliest live ticket on
-- the node (slot_wait.lua), so releases seen in different orders by
-- different nodes cannot split the head's majority (docs/design/HANDOVER.md).
-- KEYS[1] the resource's lock key (the limit's mark); KEYS[2], KEYS[3] as
-- queue.lua; KEYS[4] fencing counter; KEYS[5 + i] the key of slot i, for
-- the n slots of the caller's mark 'limit:<n>' (keys past them are the
-- script's own: slot_release's record set).
-- Returns nothing: it defines slotKey, keepMark and settle.
local function slotKey(i)
	return KEYS[5 + tonumber(i)]
end
-- keepMark keeps the mark at least ttl ms, with mark's limit in use as
-- long (slot_mark.lua): a mark outlives every slot key and reservation, so
-- no plain lock slips in beside them. It returns as useMark.
local function keepMark(mark, ttl)
	return useMark(KEYS[1], mark, ttl)
end
-- settle follows a change of the queue's head: with nobody queued, reserved
-- slots are freed (and the mark with the last slot, unless callers of
-- another limit may hold others) so that they do not
-- wait for their lease; otherwise the head is told of a reserved slot.
local function settle(mark, channel)
	local h = redis.call('ZRANGE', KEYS[2], 0, 0)
	local first
	local last = 4 + tonumber(string.sub(mark, 7))
	for i = 5, last do
		local v = redis.call('GET', KEYS[i])
		if v and string.sub(v, 1, 7) == 'queued:' then
			if #h == 0 then
				redis.call('DEL', KEYS[i])
			elseif not first then
				first = i - 5
			end
		end
	end
	if #h == 0 then
		if redis.call('GET', KEYS[1]) == mark and redis.call('EXISTS', unpack(KEYS, 5, last)) == 0 then
			redis.call('DEL', KEYS[1])
		end
	elseif first and channel ~= '' then
		redis.call('PUBLISH', channel, 'queued:' .. h[1] .. '/' .. first)
	end
end
