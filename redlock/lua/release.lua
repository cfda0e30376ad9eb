-- release: delete the lock key only if it holds our token, then announce the
-- release to waiters (unless the channel is empty: undoing a failed attempt
-- wakes nobody, or contenders would retry in lockstep).
-- KEYS[1] lock key
-- ARGV[1] token; ARGV[2] release channel ('' for none)
-- Returns 1 if the key was deleted, 0 if it was not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	if ARGV[2] ~= '' then
		redis.call('PUBLISH', ARGV[2], '1')
	end
	return 1
end
return 0
