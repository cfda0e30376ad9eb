-- inspect: read a resource's state atomically.
-- KEYS[1] lock key; KEYS[2] fencing counter key
-- Returns {holder token or nil, remaining TTL in ms (-2 if absent), fencing counter or nil}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
