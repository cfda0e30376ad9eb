package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// memLocks is an in-memory lock service with redlock's semantics, on
// whatever clock time.Now reads (the fake clock inside a synctest bubble).
type memLocks struct {
	mu   sync.Mutex
	keys map[string]*memLease
}

func newMemLocks() *memLocks { return &memLocks{keys: map[string]*memLease{}} }

// client returns one replica's connection to the service.
func (m *memLocks) client() *memClient { return &memClient{m: m} }

// held reports whether resource is held now.
func (m *memLocks) held(resource string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.keys[resource]
	return l != nil && time.Now().Before(l.expires)
}

// drop deletes resource's key, as if the nodes lost it.
func (m *memLocks) drop(resource string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.keys, resource)
}

// memClient is one replica's lock client. A dead client no longer extends
// its locks (they expire) and cannot acquire.
type memClient struct {
	m        *memLocks
	dead     atomic.Bool
	attempts atomic.Int64
	latency  time.Duration // of each TryAcquire, set before use
	// nodeOffset is the service's clock minus this replica's, as Check
	// reports it.
	nodeOffset atomic.Int64
}

func (c *memClient) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	if c.dead.Load() {
		return nil, redis.ErrClosed
	}
	time.Sleep(c.latency)
	c.attempts.Add(1)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	now := time.Now()
	if cur := c.m.keys[resource]; cur != nil && now.Before(cur.expires) {
		return nil, fmt.Errorf("%w: held", redlock.ErrLocked)
	}
	l := &memLease{c: c, res: resource, ttl: ttl, expires: now.Add(ttl)}
	c.m.keys[resource] = l
	return l, nil
}

func (c *memClient) Acquire(ctx context.Context, resource string, ttl time.Duration) (lease, error) {
	for {
		if c.dead.Load() {
			return nil, redis.ErrClosed
		}
		c.attempts.Add(1)
		c.m.mu.Lock()
		now := time.Now()
		if cur := c.m.keys[resource]; cur == nil || !now.Before(cur.expires) {
			l := &memLease{c: c, res: resource, ttl: ttl, expires: now.Add(ttl)}
			c.m.keys[resource] = l
			c.m.mu.Unlock()
			return l, nil
		}
		c.m.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), redlock.ErrLocked)
		case <-time.After(time.Millisecond):
		}
	}
}

type memLease struct {
	note     string // Mark's note
	c        *memClient
	res      string
	ttl      time.Duration
	expires  time.Time // guarded by c.m.mu
	released bool
	cancels  []context.CancelCauseFunc
}

// current reports whether l is the resource's live key. Called with m.mu.
func (l *memLease) currentLocked(now time.Time) bool {
	return l.c.m.keys[l.res] == l && now.Before(l.expires)
}

func (l *memLease) KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	kctx, cancel := context.WithCancelCause(ctx)
	m := l.c.m
	m.mu.Lock()
	if l.released {
		m.mu.Unlock()
		cancel(nil)
		return kctx, func() { cancel(context.Canceled) }
	}
	l.cancels = append(l.cancels, cancel)
	m.mu.Unlock()
	go func() {
		for {
			m.mu.Lock()
			wait, dead := l.ttl/3, l.c.dead.Load()
			if dead {
				// Like redlock's watchdog: lost a little before expiry.
				wait = time.Until(l.expires) - l.ttl/50
			}
			m.mu.Unlock()
			select {
			case <-kctx.Done():
				return
			case <-time.After(wait):
			}
			m.mu.Lock()
			now := time.Now()
			if l.released {
				m.mu.Unlock()
				return
			}
			if dead || !l.currentLocked(now) {
				m.mu.Unlock()
				cancel(redlock.ErrLockLost)
				return
			}
			if !l.c.dead.Load() {
				l.expires = now.Add(l.ttl)
			}
			m.mu.Unlock()
		}
	}()
	return kctx, func() { cancel(context.Canceled) }
}

func (l *memLease) Release(context.Context) error {
	m := l.c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.released {
		return redlock.ErrNotHeld
	}
	l.released = true
	for _, cancel := range l.cancels {
		cancel(nil)
	}
	l.cancels = nil
	if !l.currentLocked(time.Now()) {
		return redlock.ErrLockLost
	}
	delete(m.keys, l.res)
	return nil
}

// LeaveToExpire stops the lease's keep-alives and keeps its key until it
// expires.
func (l *memLease) LeaveToExpire() error {
	m := l.c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.released {
		return redlock.ErrNotHeld
	}
	l.released = true
	for _, cancel := range l.cancels {
		cancel(nil)
	}
	l.cancels = nil
	return nil
}

func (c *memClient) Record(ctx context.Context, resource string) (time.Duration, redlock.Holder, bool) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	l := c.m.keys[resource]
	if l == nil || !time.Now().Before(l.expires) {
		return 0, redlock.Holder{}, false
	}
	return time.Until(l.expires), redlock.Holder{}, true
}

// Check reports the service's clock as offset by c.nodeOffset.
func (c *memClient) Check(ctx context.Context) ([]redlock.NodeReport, error) {
	if c.dead.Load() {
		return nil, redis.ErrClosed
	}
	return []redlock.NodeReport{{Addr: "mem:1", ClockOffset: time.Duration(c.nodeOffset.Load())}}, nil
}

// Mark takes resource with note and leaves it to expire, or returns the
// note of its holder.
func (c *memClient) Mark(ctx context.Context, resource string, ttl time.Duration, note string) (string, error) {
	l, err := c.TryAcquire(ctx, resource, ttl)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if err != nil {
		if cur := c.m.keys[resource]; cur != nil {
			return cur.note, err
		}
		return "", err
	}
	l.(*memLease).note = note
	l.(*memLease).released = true // left to expire
	return "", nil
}
