-- slot_release_unqueued (after record.lua, sent before queue.lua in
-- slot_release): the common case, a resource nobody queues for: delete
-- the slot's key if it holds the token. No prelude and no announcement, as
-- queue_release.lua's: a waiter queues (slot_wait.lua) before it waits
-- for one.
-- KEYS as slot_queue.lua, then the holder's completion record set if its
-- record is to be written (record.lua)
-- ARGV[1] token; ARGV[2] the slot's number; ARGV[3] n; ARGV[4] lease in
-- ms; ARGV[5] release channel ('' for none); with a record set: ARGV[6]
-- record id; ARGV[7] window (scaled, record.lua)
-- Returns 1 if the slot's key held the token, 0 if not; when waiters are
-- queued it returns nothing and slot_release.lua runs.
if redis.call('EXISTS', KEYS[2]) == 0 then
	local sk = KEYS[5 + tonumber(ARGV[2])]
	local mine = redis.call('GET', sk) == ARGV[1]
	if mine then
		redis.call('DEL', sk)
	end
	if ARGV[6] then
		record(KEYS[#KEYS], ARGV[6], ARGV[7])
	end
	return mine and 1 or 0
end
