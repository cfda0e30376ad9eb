-- slot_mark: the prelude of the slot scripts that set a slot key or a
-- reservation. The resource's own lock key holds the mark of the limits in
-- use on this node while slots are held (docs/design/REDLOCK.md, "Limits"):
-- 'limit:<n>' while one limit is in use (the key's TTL covers its slots),
-- 'limit:<n>@<until>,<m>@<until>' while callers of several limits share the
-- slots during a change of n, each with the node time in ms until which a
-- slot or reservation it set may last. The key's TTL is never lowered, so
-- it outlives every slot key and reservation whatever the entries say: the
-- entries only tell who is using the resource.
-- KEYS: none of its own.
-- Returns nothing: otherMark(key) returns what a resource held by a plain
-- lock answers a slot caller ('nolimit'), or nil when key holds a mark or
-- nothing; useMark(key, mark, ttl) records that a holder of mark's limit
-- holds something for ttl ms and returns the new mark when the set of
-- limits in use changed (nil when not).
local function otherMark(key)
	local m = redis.call('GET', key)
	if not m or string.sub(m, 1, 6) == 'limit:' then
		return nil
	end
	return 'nolimit'
end
local function nowMs()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- limitsOf reads mark m of key into {limit = until}.
local function limitsOf(key, m, now)
	local out = {}
	local body = string.sub(m, 7)
	if string.find(body, '@', 1, true) then
		for n, u in string.gmatch(body, '(%d+)@(%d+)') do
			out[tonumber(n)] = tonumber(u)
		end
	else
		out[tonumber(body)] = now + math.max(redis.call('PTTL', key), 0) + 1
	end
	return out
end
local function useMark(key, mark, ttl)
	ttl = tonumber(ttl)
	local m = redis.call('GET', key)
	local pttl = redis.call('PTTL', key)
	if not m or m == mark then -- one limit: as before any change
		if pttl < ttl then
			redis.call('SET', key, mark, 'PX', ttl)
		end
		return nil
	end
	local now = nowMs()
	local ls = limitsOf(key, m, now)
	local own = tonumber(string.sub(mark, 7))
	local had, live = {}, {}
	for n, u in pairs(ls) do
		had[#had + 1] = n
		if u > now and n ~= own then
			live[#live + 1] = n
		end
	end
	-- +1: now is rounded down, and an entry must not end before its slot.
	ls[own] = math.max(ls[own] or 0, now + ttl + 1)
	live[#live + 1] = own
	table.sort(had)
	table.sort(live)
	local v, last = mark, ls[own]
	if #live > 1 then
		local parts = {}
		for i, n in ipairs(live) do
			parts[i] = n .. '@' .. string.format('%.0f', ls[n])
			last = math.max(last, ls[n])
		end
		v = 'limit:' .. table.concat(parts, ',')
	end
	redis.call('SET', key, v, 'PX', math.max(pttl, last - now))
	if table.concat(had, ',') ~= table.concat(live, ',') then
		return v
	end
	return nil
end
