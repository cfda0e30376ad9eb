package middleware

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// LockInfo describes the lock a handler runs under.
type LockInfo struct {
	Resource string    // the locked resource's name
	Token    string    // the lock's random token
	Fence    int64     // fencing token, 0 unless acquired with redlock.WithFencing (see WithLockOptions)
	Until    time.Time // end of validity when the handler started (kept alive since)
	Slot     int       // which of WithLimit's n slots the lock holds; 0 without a limit
}

type infoKey struct{}

func lockInfoOf(lock *redlock.Lock) LockInfo {
	return LockInfo{Resource: lock.Resource(), Token: lock.Token(), Fence: lock.Fence(), Until: lock.Until(), Slot: lock.Slot()}
}

// LockFromContext returns the lock the handler runs under; false when the
// task runs without a lock (empty key, or not under this middleware).
func LockFromContext(ctx context.Context) (LockInfo, bool) {
	li, ok := ctx.Value(infoKey{}).(LockInfo)
	return li, ok
}
