-- slot_release: release.lua for one slot of a resource used WithLimit(n)
-- (limit.go): delete the slot's key if it holds the token and, once no slot
-- is held, the limit's mark, so that the resource can be used with another
-- limit at once; then announce the release (unless the channel is empty).
-- KEYS[1] slot key; KEYS[2] the resource's lock key; KEYS[3..] every slot key
-- ARGV[1] token; ARGV[2] release channel ('' for none); ARGV[3] mark;
-- ARGV[4] the slot's number, the announcement (a woken waiter tries it first)
-- Returns 1 if the slot's key was deleted, 0 if it was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[3] and redis.call('EXISTS', unpack(KEYS, 3)) == 0 then
	redis.call('DEL', KEYS[2])
end
if ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], ARGV[4])
end
return 1
