-- slot_wait: a queued waiter's round on one slot: the slot, if free or reserved and the waiter first.
-- KEYS as slot_release.lua, without a record set
-- ARGV[1] token; ARGV[2] ttl in ms; ARGV[3] counter retention in ms; ARGV[4] n; ARGV[5] '1' to fence;
-- ARGV[6] fence classes; ARGV[7] slot; ARGV[8] ticket; ARGV[9] waiter id; ARGV[10] lease in ms;
-- ARGV[11] channel
-- Returns the fence (fenced) or 1 when set, nil when refused (the waiter queued or renewed).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do -- drop lapsed waiters
	redis.call('ZREM', KEYS[2], id)
	redis.call('ZREM', KEYS[3], id)
end
local sk = KEYS[5 + tonumber(ARGV[7])]
local cur = redis.call('GET', sk)
local free = not cur or string.sub(cur, 1, 7) == 'queued:'
local head = free and redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES') or {}
local s = tonumber(ARGV[8])
local first = free and (#head == 0 or head[1] == ARGV[9] or tonumber(head[2]) > s
	or (tonumber(head[2]) == s and head[1] > ARGV[9]))
if not first then
	redis.call('ZADD', KEYS[2], ARGV[8], ARGV[9])
	redis.call('ZADD', KEYS[3], now + tonumber(ARGV[10]), ARGV[9])
	redis.call('PEXPIRE', KEYS[2], ARGV[10])
	redis.call('PEXPIRE', KEYS[3], ARGV[10])
	return false
end
redis.call('SET', sk, ARGV[1], 'PX', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[9])
redis.call('ZREM', KEYS[3], ARGV[9])
local h = redis.call('ZRANGE', KEYS[2], 0, 0)[1] -- the new head is told of the first reserved slot
for i = 5, 4 + tonumber(ARGV[4]) do
	local v = redis.call('GET', KEYS[i])
	if v and string.sub(v, 1, 7) == 'queued:' then
		if h then
			redis.call('PUBLISH', ARGV[11], 'queued:' .. h .. '/' .. (i - 5))
			break
		end
		redis.call('DEL', KEYS[i]) -- nobody left queued: the slot need not wait for its lease
	end
end
if ARGV[5] ~= '1' then
	return 1
end
local c = redis.call('GET', KEYS[4]) -- the slot's fence, as fence_acquire.lua takes it
local f = c and tonumber(c) + 1 or tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
local n = tonumber(ARGV[6])
f = f + math.fmod(tonumber(ARGV[7]) - math.fmod(f, n) + n, n)
redis.call('SET', KEYS[4], string.format('%.0f', f), 'PX', ARGV[3])
return f
