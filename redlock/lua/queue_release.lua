-- queue_release (after queue.lua): delete the lock key if it holds the
-- token, or reserve it for the queue head when waiters are queued, and
-- announce the release.
-- KEYS as queue.lua
-- ARGV[1] token; ARGV[2] lease in ms; ARGV[3] release channel ('' for none)
-- Returns 1, or 0 when the key was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
free(ARGV[2], ARGV[3])
return 1
