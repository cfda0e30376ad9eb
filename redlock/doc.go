// Package redlock implements the Redlock distributed lock over N independent
// Redis masters, as described in redis.io's "Distributed locks with Redis".
//
// A lock on a resource is held when a quorum (N/2+1) of the nodes accepted
// `SET key token NX PX ttl` and the time spent acquiring it leaves a positive
// validity: ttl − elapsed − (ttl·driftFactor + 2ms). The client sends the
// command to all nodes at once, each call bounded by a per-node timeout, and
// answers as soon as the outcome is decided: a slow or dead node never delays a
// caller once a quorum has answered. A failed attempt is undone on every node
// that may hold the token (late answers included) before a jittered retry.
//
// Beyond the algorithm as written:
//
//   - Wake on release: waiters in [Client.Acquire] subscribe (one shared
//     pub/sub connection per node) to the resource's release channel and retry
//     within a round trip of a release; in-process waiters queue locally in
//     FIFO order so that a hot resource is handed from one holder to the next
//     without a thundering herd.
//   - Keep-alive with a loss signal: [Lock.KeepAlive] extends the lock before
//     its validity runs low and cancels the returned context with cause
//     [ErrLockLost] no later than [Lock.Until] when it can no longer prove a
//     quorum.
//   - Fencing tokens ([WithFencing]): a number that strictly increases with
//     every acquisition of a resource, for storage to reject stale writers;
//     it survives one node's data loss, at the price of needing one node more
//     than a quorum (N−q+2) to answer.
//   - Distinguishable errors: [ErrLocked], [ErrQuorum], [ErrLockLost],
//     [ErrNotHeld], [ErrInvalid], [ErrClosed]; per-node causes are [*NodeError]
//     values reachable with errors.As; context errors stay context errors.
//
// # Safety assumptions
//
// Mutual exclusion holds while (1) clocks of the client and the nodes advance
// at nearly the same rate (drift bounded by the drift factor), (2) a node that
// loses its data (restart without persistence, or a crash with fsync=everysec)
// stays unavailable for at least the largest TTL in use before rejoining (the
// delayed-restart rule) or runs with AOF fsync=always, and (3) the holder
// finishes its work within the validity window: a process pause longer than
// the validity breaks the lock, which is what fencing tokens are for. Redis
// expires keys by its wall clock, so (4) no majority of nodes may have its
// wall clock stepped forward while a lock is held (slew it, as NTP does by
// default; a step on a minority is safe), and (5) no node may evict keys:
// maxmemory-policy noeviction, or no maxmemory limit. [Client.Check] reports
// each node's clock offset and settings.
package redlock
