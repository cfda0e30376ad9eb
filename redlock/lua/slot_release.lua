-- slot_release: release one slot; with waiters queued it is reserved for the queue with the lease as TTL.
-- KEYS[1] lock key (slot 0); KEYS[2] waiter queue; KEYS[3] lease ends; KEYS[4] fencing counter;
-- KEYS[5 + i] the key of slot i for the caller's n slots; then the record set (if one is written)
-- ARGV[1] token; ARGV[2] slot; ARGV[3] n; ARGV[4] lease in ms; ARGV[5] channel ('' for none);
-- ARGV[6] record id; ARGV[7] window
-- Returns 1 if the slot's key held the token, 0 if not.
local sk = KEYS[5 + tonumber(ARGV[2])]
local mine = redis.call('GET', sk) == ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 0 then -- nobody queued: unannounced compare-and-delete
	if mine then
		redis.call('DEL', sk)
	end
else
	local t = redis.call('TIME')
	local now = t[1] * 1000 + math.floor(t[2] / 1000)
	for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
		redis.call('ZREM', KEYS[2], id)
		redis.call('ZREM', KEYS[3], id)
	end
	if mine then
		local h = redis.call('ZRANGE', KEYS[2], 0, 0)
		if #h > 0 then
			redis.call('SET', sk, 'queued:' .. h[1], 'PX', ARGV[4])
			if ARGV[5] ~= '' then
				redis.call('PUBLISH', ARGV[5], 'queued:' .. h[1] .. '/' .. ARGV[2])
			end
		else -- every waiter lapsed: free the reserved slots too
			redis.call('DEL', sk)
			for i = 5, 4 + tonumber(ARGV[3]) do
				local v = redis.call('GET', KEYS[i])
				if v and string.sub(v, 1, 7) == 'queued:' then
					redis.call('DEL', KEYS[i])
				end
			end
		end
	end
end
if ARGV[6] and tonumber(ARGV[7]) < 0 then -- the holder's completion record
	redis.call('ZREM', KEYS[#KEYS], ARGV[6])
elseif ARGV[6] then
	local t = redis.call('TIME')
	local ms = (t[1] * 1000 + math.floor(t[2] / 1000)) * 1024
	redis.call('ZREMRANGEBYSCORE', KEYS[#KEYS], '-inf', ms + 1023)
	redis.call('ZADD', KEYS[#KEYS], ms + ARGV[7], ARGV[6])
	if redis.call('PTTL', KEYS[#KEYS]) < math.floor(ARGV[7] / 1024) then
		redis.call('PEXPIRE', KEYS[#KEYS], math.floor(ARGV[7] / 1024))
	end
end
return mine and 1 or 0
