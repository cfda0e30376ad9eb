-- release_many_head: the start of release_many, the releases of one batch
-- in one script call (this file, then release_unqueued.lua, queue.lua and
-- queue_release.lua, then release_many_tail.lua). Each release runs exactly
-- as queue_release does, with its own KEYS and ARGV; one call instead of one
-- per release saves the script set-up on the node.
-- KEYS: queue.lua's three keys per release, in order
-- ARGV: queue_release.lua's three arguments per release, in the same order
-- Returns each release's answer, in order.
local function release_one(KEYS, ARGV)
