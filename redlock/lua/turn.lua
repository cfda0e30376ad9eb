-- turn: a queued waiter's round, also releasing the old holder's token (a hand-over) in one step.
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] lease ends; KEYS[4] fencing counter; KEYS[5] record set
-- ARGV[1] old token ('' for none); ARGV[2] new token; ARGV[3] ttl in ms; ARGV[4] ticket; ARGV[5] waiter id;
-- ARGV[6] lease in ms; ARGV[7] '1' to fence; ARGV[8] counter retention in ms; ARGV[9] channel;
-- ARGV[10] '1' for keep mode; with KEYS[5], ARGV[11] record id; ARGV[12] window
-- Returns {old released (0/1), new set (0/1), fence or 0, jumped the queue (0/1)}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
	redis.call('ZREM', KEYS[2], id)
	redis.call('ZREM', KEYS[3], id)
end
local cur = redis.call('GET', KEYS[1])
local mine = cur == ARGV[1]
local free = not cur or mine or string.sub(cur, 1, 7) == 'queued:' -- as SET NX sees it, or ours
local h = free and redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES') or {}
local s = tonumber(ARGV[4])
local first = free and (#h == 0 or h[1] == ARGV[5] or tonumber(h[2]) > s
	or (tonumber(h[2]) == s and h[1] > ARGV[5]))
local take = first or (mine and ARGV[10] == '1')
local f = 0
if take then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	redis.call('ZREM', KEYS[2], ARGV[5])
	redis.call('ZREM', KEYS[3], ARGV[5])
	if ARGV[7] == '1' then -- a fence as fence_acquire.lua takes it
		local c = redis.call('GET', KEYS[4])
		f = c and tonumber(c) + 1 or tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
		redis.call('SET', KEYS[4], string.format('%.0f', f), 'PX', ARGV[8])
	end
else
	redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
	redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[5])
	redis.call('PEXPIRE', KEYS[2], ARGV[6])
	redis.call('PEXPIRE', KEYS[3], ARGV[6])
	if mine then -- the old token's key is reserved for h[1], the live head ahead of the new waiter
		redis.call('SET', KEYS[1], 'queued:' .. h[1], 'PX', ARGV[6])
		redis.call('PUBLISH', ARGV[9], 'queued:' .. h[1])
	end
end
if KEYS[5] and tonumber(ARGV[12]) < 0 then -- the old holder's completion record, on every node
	redis.call('ZREM', KEYS[5], ARGV[11])
elseif KEYS[5] then
	local ms = now * 1024
	redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', ms + 1023)
	redis.call('ZADD', KEYS[5], ms + ARGV[12], ARGV[11])
	if redis.call('PTTL', KEYS[5]) < math.floor(ARGV[12] / 1024) then
		redis.call('PEXPIRE', KEYS[5], math.floor(ARGV[12] / 1024))
	end
end
return {mine and 1 or 0, take and 1 or 0, f, (take and not first) and 1 or 0}
