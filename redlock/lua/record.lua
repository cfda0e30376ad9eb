-- record: the prelude of the scripts that release a lock (release_unqueued,
-- release_many, turn, slot_release, slot_turn): they write the releasing
-- holder's completion record (completion.go) with record(key, id, window,
-- now), in the same call, once they found the key still held by its token.
-- It drops the entries of the record set key past their expiry, adds id
-- expiring window ms after now (the writer's clock, in ms), and keeps the
-- set a window past it. Written after the release's own writes: a server
-- at maxmemory refuses a script's first write that may grow memory, not a
-- later one, so a key released here has its record.
-- KEYS: none of its own.
-- Returns nothing: record(key, id, window, now) returns nothing.
local function record(key, id, window, now)
	redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
	redis.call('ZADD', key, now + window, id)
	redis.call('PEXPIRE', key, window)
end
