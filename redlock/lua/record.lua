-- record: the prelude of the scripts that release a lock (release_unqueued,
-- release_many, turn, slot_release, slot_turn): they write the releasing
-- holder's completion record (completion.go) with record(key, id, window),
-- in the same call, on every node the call reaches, whether the key
-- still held the releasing token there or not: a key expired on a node
-- paused past its TTL was kept by the majority that held it, and a record
-- on one node more survives one more node's data loss (the Go side sends a
-- record only for a lock that was not lost).
-- Scores are in ms times 1024 (completion.go, runScale): window is the
-- record's window so scaled plus its run, or -1 to delete the record
-- instead. Expiries are on the node's clock (TIME, read once per call),
-- never a writer's: a writer whose clock runs ahead must not prune the
-- others' records. Effects replication (the default since Redis 5) lets a
-- script write after TIME. It drops the entries of the record set key past
-- their expiry, adds id scored now + window, and keeps the set at least a
-- window past it (never less than it was kept). Scores (16 digits, below
-- 2^53) go to redis.call as Lua numbers: redis.call converts them with
-- 17 digits (miniredis: integers exactly), unlike Lua's own 14. Written
-- after the release's own writes: a server at maxmemory refuses a script's
-- first write that may grow memory, not a later one, so a key released
-- here has its record.
-- KEYS: none of its own.
-- Returns nothing: record(key, id, window) returns nothing.
local recordNow -- the node's clock in scaled ms, this call's first record's
local function record(key, id, window)
	window = tonumber(window)
	if window < 0 then
		redis.call('ZREM', key, id)
		return
	end
	if not recordNow then
		local t = redis.call('TIME')
		recordNow = (t[1] * 1000 + math.floor(t[2] / 1000)) * 1024
	end
	redis.call('ZREMRANGEBYSCORE', key, '-inf', recordNow + 1023)
	redis.call('ZADD', key, recordNow + window, id)
	local ms = math.floor(window / 1024)
	if redis.call('PTTL', key) < ms then -- a shorter window never cuts a longer one's record
		redis.call('PEXPIRE', key, ms)
	end
end
