-- release_many_tail: the end of release_many (release_many_head.lua).
-- KEYS and ARGV as release_many_head.lua
-- Returns each release's answer, in order.
end
local out = {}
for i = 1, #KEYS / 3 do
	local j = 3 * i
	out[i] = release_one({KEYS[j - 2], KEYS[j - 1], KEYS[j]}, {ARGV[j - 2], ARGV[j - 1], ARGV[j]})
end
return out
