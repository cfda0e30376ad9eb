-- leave_queue (after queue.lua): take a waiter that gave up out of the
-- queue, and pass on a reservation made for it.
-- KEYS as queue.lua
-- ARGV[1] waiter id; ARGV[2] lease in ms; ARGV[3] release channel ('' for none)
-- Returns 1.
dequeue(ARGV[1])
if redis.call('GET', KEYS[1]) == 'queued:' .. ARGV[1] then
	free(ARGV[2], ARGV[3])
end
return 1
