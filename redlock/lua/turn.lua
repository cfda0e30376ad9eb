-- turn (after queue.lua): take the lock for a queued waiter, and in the same
-- step release the previous holder's token (a hand-over). The new token is
-- set when the key is free, reserved or the old token's, and no live waiter
-- is queued ahead of the new one's ticket; otherwise the new one is queued
-- and the old token, if it held the key, is released (reserved for the
-- head). In keep mode a key that holds the old token always passes to the
-- new one, so that a successor that started at once keeps it (it jumps the
-- queue once). The fence step must match fence_acquire.lua's.
-- KEYS as queue.lua, plus KEYS[4] fencing counter key; KEYS[5] the old
-- holder's completion record set, if its record is to be written (on every
-- node it reaches: a key expired there was kept by a majority; record.lua)
-- ARGV[1] old token ('' for none); ARGV[2] new token; ARGV[3] ttl in ms;
-- ARGV[4] ticket; ARGV[5] waiter id; ARGV[6] lease in ms; ARGV[7] '1' to
-- bump the fence; ARGV[8] counter retention in ms; ARGV[9] release channel;
-- ARGV[10] '1' for keep mode; with KEYS[5]: ARGV[11] record id; ARGV[12]
-- window (scaled, record.lua)
-- Returns {old released (0/1), new set (0/1), fence or 0, jumped the queue (0/1)}.
local cur = redis.call('GET', KEYS[1])
local mine = cur ~= false and ARGV[1] ~= '' and cur == ARGV[1]
if not mine and KEYS[5] then -- expired here, or taken: the work was kept by a majority
	record(KEYS[5], ARGV[11], ARGV[12])
end
if cur and not mine and string.sub(cur, 1, 7) ~= 'queued:' then
	enqueue(ARGV[4], ARGV[5], ARGV[6])
	return {0, 0, 0, 0}
end
local h = {}
if queued then
	h = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
end
local s = tonumber(ARGV[4])
local first = #h == 0 or h[1] == ARGV[5] or tonumber(h[2]) > s or (tonumber(h[2]) == s and h[1] > ARGV[5])
if first or (mine and ARGV[10] == '1') then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	dequeue(ARGV[5])
	local f = 0
	if ARGV[7] == '1' then
		if redis.call('EXISTS', KEYS[4]) == 1 then
			f = redis.call('INCR', KEYS[4])
			redis.call('PEXPIRE', KEYS[4], ARGV[8])
		else
			local t = redis.call('TIME')
			local c = t[1] .. string.format('%06d', tonumber(t[2]))
			redis.call('SET', KEYS[4], c, 'PX', ARGV[8])
			f = tonumber(c)
		end
	end
	if mine and KEYS[5] then
		record(KEYS[5], ARGV[11], ARGV[12])
	end
	return {mine and 1 or 0, 1, f, first and 0 or 1}
end
enqueue(ARGV[4], ARGV[5], ARGV[6])
if mine then
	free(ARGV[6], ARGV[9])
	if KEYS[5] then
		record(KEYS[5], ARGV[11], ARGV[12])
	end
	return {1, 0, 0, 0}
end
return {0, 0, 0, 0}
