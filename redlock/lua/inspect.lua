-- inspect: read a resource's lock key, fencing counter and existing slot keys (EXISTS 64 at a time).
-- KEYS[1] lock key (slot 0); KEYS[2] fencing counter; KEYS[2 + i] the key of slot i, i >= 1
-- Returns {token or nil, TTL in ms (-2 if absent), counter or nil}, then {i, token, TTL} per slot held.
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
