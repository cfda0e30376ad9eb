-- inspect_slots: read the slots of a resource used WithLimit(n) atomically.
-- KEYS[1..n] the slot keys; KEYS[n+1] fencing counter key
-- Returns {token or nil, remaining TTL in ms (-2 if absent)} per slot, in
-- order, then the fencing counter or nil.
local out = {}
for i = 1, #KEYS - 1 do
	out[2 * i - 1] = redis.call('GET', KEYS[i])
	out[2 * i] = redis.call('PTTL', KEYS[i])
end
out[2 * #KEYS - 1] = redis.call('GET', KEYS[#KEYS])
return out
