-- inspect: read a resource's state atomically: its lock key (slot 0 of a
-- resource used WithLimit) and fencing counter, and every other slot key
-- that exists (looked for 64 at a time, so a resource without slots costs
-- a few EXISTS calls).
-- KEYS[1] lock key; KEYS[2] fencing counter key; KEYS[2 + i] the key of
-- slot i, for i from 1 on
-- Returns {holder token or nil, remaining TTL in ms (-2 if absent),
-- fencing counter or nil}, followed by {i, token, remaining TTL in ms} for
-- each slot i > 0 whose key exists.
local out = {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
for i = 3, #KEYS, 64 do
	local j = math.min(i + 63, #KEYS)
	if redis.call('EXISTS', unpack(KEYS, i, j)) > 0 then
		for k = i, j do
			local v = redis.call('GET', KEYS[k])
			if v then
				out[#out + 1] = k - 2
				out[#out + 1] = v
				out[#out + 1] = redis.call('PTTL', KEYS[k])
			end
		end
	end
end
return out
