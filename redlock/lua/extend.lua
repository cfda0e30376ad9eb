-- extend: raise the lock key's TTL to at least the new one, only if the key
-- still holds our token: an expired or stolen lock is never re-created, and a
-- key is never shortened (a shorter extension that fails to reach a quorum
-- must not cut the keys under the validity the holder still counts on).
-- KEYS[1] lock key
-- ARGV[1] token; ARGV[2] ttl in ms
-- Returns 1 if the key holds the token (extended or already long enough), 0 if not.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
