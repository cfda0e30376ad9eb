-- release: delete the lock key if it holds the token, then announce the release.
-- KEYS[1] lock key
-- ARGV[1] token; ARGV[2] release channel ('' for none: an undo wakes nobody)
-- Returns 1 if the key was deleted, 0 if it was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], '1')
end
return 1
