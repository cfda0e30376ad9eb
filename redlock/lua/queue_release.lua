-- queue_release (after record.lua): a holder's release. With nobody queued
-- on the node, the common case, it is a compare-and-delete without an
-- announcement (measured: 2.6µs a call against 3.5µs with the queue's
-- prelude, 1.9µs against 2.6µs without the announcement): a waiter queues
-- on the nodes (turn.lua) before it waits for one, so a node without a
-- queue has nobody to wake. With waiters queued, lapsed ones are dropped
-- and a key that holds the token is reserved for the queue's head
-- ('queued:<id>', the lease as TTL; deleted when none is left), and the
-- release is announced.
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] lease ends (queue.lua);
-- KEYS[4] the completion record set, if the holder's record is to be
-- written (record.lua)
-- ARGV[1] token; ARGV[2] lease in ms; ARGV[3] release channel ('' for
-- none); with KEYS[4]: ARGV[4] record id; ARGV[5] window (scaled,
-- record.lua)
-- Returns 1, or 0 when the key was not ours.
local mine = redis.call('GET', KEYS[1]) == ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 0 then
	if mine then
		redis.call('DEL', KEYS[1])
	end
else
	local t = redis.call('TIME')
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
	if #gone > 0 then
		redis.call('ZREM', KEYS[2], unpack(gone))
		redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
	end
	if mine then
		local h = redis.call('ZRANGE', KEYS[2], 0, 0)
		local msg = '1'
		if #h > 0 then
			msg = 'queued:' .. h[1]
			redis.call('SET', KEYS[1], msg, 'PX', ARGV[2])
		else
			redis.call('DEL', KEYS[1])
		end
		if ARGV[3] ~= '' then
			redis.call('PUBLISH', ARGV[3], msg)
		end
	end
end
if KEYS[4] then
	record(KEYS[4], ARGV[4], ARGV[5])
end
return mine and 1 or 0
