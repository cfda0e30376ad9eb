-- release_unqueued (sent before queue.lua in queue_release): the common
-- case of a release, a resource nobody queues for, as cheap as release.lua:
-- no prelude, no queue helpers (measured: 2.6µs a call against 3.5µs with
-- the prelude). It does what queue_release does when the queue is absent.
-- KEYS as queue.lua
-- ARGV as queue_release.lua
-- Returns 1, or 0 when the key was not ours; when waiters are queued it
-- returns nothing and queue_release.lua runs.
if redis.call('EXISTS', KEYS[2]) == 0 then
	if redis.call('GET', KEYS[1]) ~= ARGV[1] then
		return 0
	end
	redis.call('DEL', KEYS[1])
	if ARGV[3] ~= '' then
		redis.call('PUBLISH', ARGV[3], '1')
	end
	return 1
end
