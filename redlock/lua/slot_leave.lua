-- slot_leave (after queue.lua, slot_queue.lua): take a waiter that gave up
-- or won out of the queue; a reservation passes to the next head (told of
-- it), or is freed when nobody is left queued.
-- KEYS as slot_queue.lua
-- ARGV[1] waiter id; ARGV[2] n; ARGV[3] release channel ('' for none)
-- Returns 1.
dequeue(ARGV[1])
settle(ARGV[2], ARGV[3])
return 1
