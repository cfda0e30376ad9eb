-- slot_release_unqueued (sent before queue.lua in slot_release): the
-- common case, a resource nobody queues for: delete the slot's key if it
-- holds the token and, once no slot is held, the limit's mark, so that the
-- resource can be used without a limit at once. A mark that names several
-- limits (slot_mark.lua) is left to its TTL: callers of another limit may
-- hold slots above this caller's n, which KEYS do not name. No prelude and no
-- announcement, as release_unqueued.lua: a waiter queues (slot_wait.lua)
-- before it waits for one.
-- KEYS as slot_queue.lua, then the holder's completion record set if its
-- record is to be written (record.lua)
-- ARGV[1] token; ARGV[2] the slot's number; ARGV[3] mark; ARGV[4] lease in
-- ms; ARGV[5] release channel ('' for none); with a record set: ARGV[6]
-- record id; ARGV[7] window (scaled, record.lua)
-- Returns 1 if the slot's key held the token, 0 if not; when waiters are
-- queued it returns nothing and slot_release.lua runs.
if redis.call('EXISTS', KEYS[2]) == 0 then
	local sk = KEYS[5 + tonumber(ARGV[2])]
	if redis.call('GET', sk) ~= ARGV[1] then
		if ARGV[6] then
			record(KEYS[#KEYS], ARGV[6], ARGV[7])
		end
		return 0
	end
	redis.call('DEL', sk)
	if redis.call('GET', KEYS[1]) == ARGV[3] and redis.call('EXISTS', unpack(KEYS, 5, 4 + tonumber(string.sub(ARGV[3], 7)))) == 0 then
		redis.call('DEL', KEYS[1])
	end
	if ARGV[6] then
		record(KEYS[#KEYS], ARGV[6], ARGV[7])
	end
	return 1
end
