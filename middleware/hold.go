package middleware

import (
	"context"
)

// holding keeps a lock while a handler runs in progress mode. ctx is
// cancelled with cause redlock.ErrLockLost when the lock is lost; stop ends
// the extensions.
type holding struct {
	ctx      context.Context
	stop     func()
	progress *progress // what Progress reports to
}
