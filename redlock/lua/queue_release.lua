-- queue_release (after queue.lua): delete the lock key if it holds the
-- token, or reserve it for the queue head when waiters are queued, and
-- announce the release.
-- KEYS as queue.lua, plus KEYS[4] the completion record set, if the
-- holder's record is to be written (record.lua)
-- ARGV[1] token; ARGV[2] lease in ms; ARGV[3] release channel ('' for none);
-- with KEYS[4]: ARGV[4] record id; ARGV[5] window in ms (scaled, record.lua)
-- Returns 1, or 0 when the key was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	if KEYS[4] then
		record(KEYS[4], ARGV[4], ARGV[5])
	end
	return 0
end
free(ARGV[2], ARGV[3])
if KEYS[4] then
	record(KEYS[4], ARGV[4], ARGV[5])
end
return 1
