// Package redlock is a Redlock distributed lock over N independent Redis
// masters (usually 3 or 5): a lock is held when a quorum (N/2+1) of them
// accepted it within its validity.
//
// Create one Client per process and share it:
//
//	client, err := redlock.NewFromURLs([]string{"redis://redis-a:6379", "redis://redis-b:6379", "redis://redis-c:6379"})
//	if err != nil { ... }
//	defer client.Close()
//
// Run a function under a lock that is kept alive and released afterwards;
// its ctx is cancelled with cause [ErrLockLost] if the lock is lost:
//
//	err = client.Run(ctx, "invoice:42", 10*time.Second, func(ctx context.Context) error { ... })
//
// Or take the lock by hand: [Client.TryAcquire] makes one attempt,
// [Client.Acquire] waits (woken by the release, in FIFO order), then
// [Lock.KeepAlive] and [Lock.Release]. Tell the outcomes apart with
// errors.Is: [ErrLocked] (another holder), [ErrQuorum] (too many nodes
// failed; each cause is a [*NodeError]), [ErrLockLost], [ErrNotHeld],
// [ErrInvalid] (bad input, named in the message), redis.ErrClosed (a closed Client); context
// errors stay context errors.
//
// [WithFencing] adds a fencing token ([Lock.Fence]) that grows with every
// acquisition, for storage to reject a paused holder's late writes.
// [WithLimit] lets up to n holders have a resource at once, each in a slot
// ([Lock.Slot]) that is a quorum lock of its own.
// [Client.Inspect] shows who holds a resource on each node, [Client.Admin]'s Check
// each node's identity, clock and settings. [WithObserver] feeds metrics.
//
// The guarantee rests on assumptions (bounded clock drift, nodes that stay
// down for a TTL after losing data, no key eviction) described with the
// algorithm in docs/design/REDLOCK.md.
package redlock
