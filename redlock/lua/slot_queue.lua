-- slot_queue (after queue.lua): the waiter queue of a resource used
-- WithLimit(n), n > 1, shared by its slots and by its plain waiters
-- (slot_wait, slot_release, slot_leave). A released slot is reserved for
-- the queue, not for one waiter: any free or reserved slot goes to the
-- earliest live ticket on the node (slot_wait.lua), so releases seen in
-- different orders by different nodes cannot split the head's majority
-- (docs/design/HANDOVER.md).
-- KEYS[1] the resource's lock key (slot 0); KEYS[2], KEYS[3] as queue.lua;
-- KEYS[4] fencing counter; KEYS[5 + i] the key of slot i, for the caller's
-- n slots (KEYS[5] is KEYS[1]; keys past them are the script's own:
-- slot_release's record set).
-- Returns nothing: it defines slotKey and settle.
local function slotKey(i)
	return KEYS[5 + tonumber(i)]
end
-- settle follows a change of the queue's head: with nobody queued, the
-- reserved slots among the caller's n are freed so that they do not wait
-- for their lease; otherwise the head is told of a reserved slot.
local function settle(n, channel)
	local h = redis.call('ZRANGE', KEYS[2], 0, 0)
	local first
	for i = 5, 4 + tonumber(n) do
		local v = redis.call('GET', KEYS[i])
		if v and string.sub(v, 1, 7) == 'queued:' then
			if #h == 0 then
				redis.call('DEL', KEYS[i])
			elseif not first then
				first = i - 5
			end
		end
	end
	if #h > 0 and first and channel ~= '' then
		redis.call('PUBLISH', channel, 'queued:' .. h[1] .. '/' .. first)
	end
end
