package redlock

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// unfitForLocking reports whether a caller's *redis.Client would let a dead
// node hold every call queued behind it (docs/guide/OPERATIONS.md): command
// retries, several dial attempts, no read or write timeout.
func unfitForLocking(cl redis.UniversalClient) bool {
	rc, ok := cl.(*redis.Client)
	if !ok {
		return false
	}
	o := rc.Options()
	return o.MaxRetries > 0 || o.DialerRetries > 1 || o.ReadTimeout <= 0 || o.WriteTimeout <= 0
}

// fitForLocking returns, for an unfit cl, a client of the lock's own made
// from cl's options with tuneForLocking's and cl's hooks (userHooks); else nil.
func fitForLocking(cl redis.UniversalClient, nodeTimeout time.Duration) redis.UniversalClient {
	if !unfitForLocking(cl) {
		return nil
	}
	o := *cl.(*redis.Client).Options() // filled in by go-redis: reset what tuneForLocking decides
	io := ioTimeout(nodeTimeout)
	for _, d := range []*time.Duration{&o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d < 0 || *d > io {
			*d = 0
		}
	}
	o.DialerRetries, o.Protocol = 0, 0
	// The caller's client registered its handlers with these; RESP2 has no push.
	o.PushNotificationProcessor, o.MaintNotificationsConfig = nil, nil
	if isDefaultDialer(o.Dialer) {
		o.Dialer = nil // go-redis's own, bound to the caller's dial timeout: a new one is made
	}
	tuneForLocking(&o, nodeTimeout)
	own := redis.NewClient(&o)
	conn := cl.(*redis.Client).Conn()
	conn.AddHook(userHooks{}) // the relay
	own.AddHook(userHooks{conn: conn})
	return own
}

// isDefaultDialer reports whether d is go-redis's own (NewDialer's closure)
// by its function's name: inlining gives each call site a closure of its
// own. TestDefaultDialerIsRecognised keeps this true across versions.
func isDefaultDialer(d func(context.Context, string, string) (net.Conn, error)) bool {
	fn := runtime.FuncForPC(reflect.ValueOf(d).Pointer())
	return fn != nil && strings.HasPrefix(fn.Name(), "github.com/redis/go-redis/v9.") && strings.Contains(fn.Name(), "NewDialer.func")
}

// userHooks runs the hooks a caller added to its client (redisotel, say)
// around the commands of the client fitForLocking makes: go-redis cannot
// read a client's hooks. It passes each command to a Conn of the caller's
// client, whose innermost hook is the relay (no Conn), which hands it back
// in the context to run on the lock's own connections; dials skip them.
type userHooks struct{ conn *redis.Conn }

// nextKey carries the lock's client's next hook through the caller's to the relay.
type nextKey struct{}

// errNoRelay: a command reached the caller's Conn without the next hook.
var errNoRelay = errors.New("redlock: a command reached the caller's client outside the lock's")

// DialHook leaves dials as they are.
func (userHooks) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs one command through the caller's hooks, or (the relay)
// hands it back to the lock's client.
func (h userHooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.conn == nil {
		return func(ctx context.Context, cmd redis.Cmder) error {
			own, ok := ctx.Value(nextKey{}).(redis.ProcessHook)
			if !ok {
				return errNoRelay
			}
			return own(ctx, cmd)
		}
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.conn.Process(context.WithValue(ctx, nextKey{}, next), cmd)
	}
}

// ProcessPipelineHook is ProcessHook for a pipeline.
func (h userHooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.conn == nil {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			own, ok := ctx.Value(nextKey{}).(redis.ProcessPipelineHook)
			if !ok {
				return errNoRelay
			}
			return own(ctx, cmds)
		}
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pipe := h.conn.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd) // queues it
		}
		_, err := pipe.Exec(context.WithValue(ctx, nextKey{}, next))
		return err
	}
}
