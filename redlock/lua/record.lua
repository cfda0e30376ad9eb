-- record: write a completion record (completion.go): drop the entries past
-- their expiry, add this one, and keep the set a window past it.
-- KEYS[1] the resource's record set
-- ARGV[1] record id; ARGV[2] window in ms; ARGV[3] the writer's time in ms
-- Returns 1.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
redis.call('ZADD', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
