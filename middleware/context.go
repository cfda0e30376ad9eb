package middleware

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// LockInfo describes the lock a handler runs under.
type LockInfo struct {
	Resource string    // the locked resource's name
	Token    string    // the lock's random token
	Fence    int64     // fencing token, 0 unless acquired with redlock.WithFencing (see WithLockOptions)
	Until    time.Time // end of validity when the handler started (kept alive since)
}

type infoKey struct{}

type progressKey struct{}

// withLockInfo gives ctx the lock's LockInfo.
func withLockInfo(ctx context.Context, lock *redlock.Lock) context.Context {
	return context.WithValue(ctx, infoKey{}, LockInfo{Resource: lock.Resource(), Token: lock.Token(), Fence: lock.Fence(), Until: lock.Until()})
}

// LockFromContext returns the lock the handler runs under; false when the
// task runs without a lock (empty key, or not under this middleware).
func LockFromContext(ctx context.Context) (LockInfo, bool) {
	li, ok := ctx.Value(infoKey{}).(LockInfo)
	return li, ok
}

// Progress reports that the handler is making progress. In progress mode
// (WithProgress) the lock is only extended while progress is reported; in the
// default mode it is a no-op.
func Progress(ctx context.Context) {
	if p, ok := ctx.Value(progressKey{}).(*progress); ok {
		p.report()
	}
}

// taskMeta is what asynq tells a handler about its task.
type taskMeta struct {
	id       string
	queue    string
	retried  int
	maxRetry int
	known    bool // run by an asynq server (the fields are set)
}

// budgetSpent reports whether asynq would archive this run on any error.
func (m taskMeta) budgetSpent() bool { return m.known && m.retried >= m.maxRetry }

// metaOf reads the task's metadata from its context. Tests replace it to run
// handlers outside an asynq server.
var metaOf = func(ctx context.Context) taskMeta {
	var m taskMeta
	m.id, m.known = asynq.GetTaskID(ctx)
	m.queue, _ = asynq.GetQueueName(ctx)
	m.retried, _ = asynq.GetRetryCount(ctx)
	m.maxRetry, _ = asynq.GetMaxRetry(ctx)
	return m
}
