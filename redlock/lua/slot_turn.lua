-- slot_turn: a local hand-over of one slot from the old token to the new one, as SET NX would take it.
-- KEYS[1] slot key; KEYS[2] fencing counter; KEYS[3] the old holder's record set (if one is written)
-- ARGV[1] old token; ARGV[2] new token; ARGV[3] ttl in ms; ARGV[4] '1' to fence; ARGV[5] counter
-- retention in ms; ARGV[6] fence classes; ARGV[7] slot; with KEYS[3], ARGV[8] record id; ARGV[9] window
-- Returns {old released (0/1), new set (0/1), fence or 0, 1 (jumped)}, {0, 0, 0, 0} when taken.
local t = redis.call('TIME')
local cur = redis.call('GET', KEYS[1])
local mine = cur == ARGV[1]
local out = {0, 0, 0, 0}
if mine or not cur then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	out = {mine and 1 or 0, 1, 0, 1}
	if ARGV[4] == '1' then -- the slot's fence, as fence_acquire.lua takes it
		local c = redis.call('GET', KEYS[2])
		local f = c and tonumber(c) + 1 or tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
		local n = tonumber(ARGV[6])
		f = f + math.fmod(tonumber(ARGV[7]) - math.fmod(f, n) + n, n)
		redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[5])
		out[3] = f
	end
end
if KEYS[3] and tonumber(ARGV[9]) < 0 then -- the old holder's completion record, on every node
	redis.call('ZREM', KEYS[3], ARGV[8])
elseif KEYS[3] then
	local ms = (t[1] * 1000 + math.floor(t[2] / 1000)) * 1024
	redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms + 1023)
	redis.call('ZADD', KEYS[3], ms + ARGV[9], ARGV[8])
	if redis.call('PTTL', KEYS[3]) < math.floor(ARGV[9] / 1024) then
		redis.call('PEXPIRE', KEYS[3], math.floor(ARGV[9] / 1024))
	end
end
return out
