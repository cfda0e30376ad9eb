-- extend: raise the lock key's TTL to at least ttl if it holds the token; never shorten it.
-- KEYS[1] lock key
-- ARGV[1] token; ARGV[2] ttl in ms
-- Returns 1 if the key holds the token, 0 if not (an expired lock is never re-created).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
