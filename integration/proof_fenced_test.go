package integration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// The fenced-store workers of TestProofPausedHolderFenced: modeHold (the
// holder that gets paused) and modeWrite (the one that takes over).

// fencedWriteScript is the fenced store: it writes the register only if the
// writer's fence is at least the highest fence it has seen for it, and
// remembers the fence. KEYS[1] register, KEYS[2] highest fence; ARGV[1]
// fence, ARGV[2] value. Returns 1 if written, 0 if rejected.
var fencedWriteScript = redis.NewScript(`
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < seen then
	return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

// fencedWrite writes value to resource's register through the fenced store.
func (w *proofWorker) fencedWrite(ctx context.Context, resource string, fence int64, value string) (bool, error) {
	key := w.register(resource)
	n, err := fencedWriteScript.Run(ctx, w.store, []string{key, key + ":fence"}, fence, value).Int()
	return n == 1, err
}

// acquireFenced takes the worker's first resource with a fencing token,
// waiting at most 10s, and opens the section it protects.
func (w *proofWorker) acquireFenced(ctx context.Context) (*redlock.Lock, checker.Section, error) {
	res := w.cfg.Resources[0]
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := w.locks.Acquire(actx, res, w.cfg.TTL, redlock.WithFencing())
	if err != nil {
		return nil, checker.Section{}, fmt.Errorf("acquire: %w", err)
	}
	return l, checker.Section{Resource: res, Holder: w.cfg.ID, Fence: l.Fence(), Start: stamp()}, nil
}

// hold is modeHold: the holder that the parent pauses past its validity.
func (w *proofWorker) hold(ctx context.Context) error {
	l, s, err := w.acquireFenced(ctx)
	if err != nil {
		return err
	}
	res := s.Resource
	work, stop := l.KeepAlive(ctx)
	defer stop()
	if s.Read, err = w.store.Get(ctx, w.register(res)).Result(); err != nil && err != redis.Nil {
		return err
	}
	first := w.cfg.ID + "/first"
	ok, err := w.fencedWrite(ctx, res, l.Fence(), first)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("first write with fence %d rejected", l.Fence())
	}
	w.emit(workerEvent{Event: "holding", Fence: l.Fence(), Until: stampOf(l.Until()), Value: first})

	// The parent stops this process here and sends "go" before resuming
	// it: the write below happens right after the pause, as if the pause
	// had struck between a last look at the lock and the write.
	w.await("go")
	stale := w.cfg.ID + "/stale"
	ok, err = w.fencedWrite(ctx, res, l.Fence(), stale)
	if err != nil {
		return err
	}
	w.emit(workerEvent{Event: "stale", OK: ok, Fence: l.Fence(), Value: stale})
	s.Wrote, s.End = first, stamp()
	s.Note = fmt.Sprintf("write after the pause accepted: %v", ok)
	w.record(s)

	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
	}
	e := workerEvent{Event: "keepalive", OK: errors.Is(context.Cause(work), redlock.ErrLockLost), Until: stampOf(l.Until())}
	if c := context.Cause(work); c != nil {
		e.Err = c.Error()
	}
	w.emit(e)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_ = l.Release(rctx) // fails with ErrLockLost: the lock expired during the pause
	return nil
}

// write is modeWrite: one fenced update of the register.
func (w *proofWorker) write(ctx context.Context) error {
	l, s, err := w.acquireFenced(ctx)
	if err != nil {
		return err
	}
	res := s.Resource
	if s.Read, err = w.store.Get(ctx, w.register(res)).Result(); err != nil && err != redis.Nil {
		return err
	}
	value := w.cfg.ID + "/1"
	ok, err := w.fencedWrite(ctx, res, l.Fence(), value)
	if err != nil {
		return err
	}
	if ok {
		s.Wrote = value
	}
	s.End = stamp()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if err := l.Release(rctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	w.record(s)
	w.emit(workerEvent{Event: "wrote", At: s.Start, OK: ok, Fence: l.Fence(), Value: value})
	return nil
}
