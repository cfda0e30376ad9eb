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
// or stuck node hold every call queued behind it (docs/guide/OPERATIONS.md):
// command retries (each with backoff), more than one dial attempt, no read
// or write timeout. Options are read after go-redis filled in its defaults;
// clients of other kinds are not checked.
func unfitForLocking(cl redis.UniversalClient) bool {
	rc, ok := cl.(*redis.Client)
	if !ok {
		return false
	}
	o := rc.Options()
	return o.MaxRetries > 0 || o.DialerRetries > 1 || o.ReadTimeout <= 0 || o.WriteTimeout <= 0
}

// fitForLocking returns a client of the lock's own, made from a copy of cl's
// options with tuneForLocking's settings and passing its commands through
// cl's hooks (userHooks), when unfitForLocking finds cl unfit; else nil.
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
	// The caller's client registered its handlers with these; the lock's
	// client has no use for push notifications (RESP2, see tuneForLocking).
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

// isDefaultDialer reports whether d is the dialer go-redis gives a client
// that has none (NewDialer's closure, bound to that client's options), by
// its function's name: inlining gives each call site of NewDialer a closure
// of its own, so the code pointer cannot tell. TestDefaultDialerIsRecognised
// keeps this true across go-redis versions.
func isDefaultDialer(d func(context.Context, string, string) (net.Conn, error)) bool {
	fn := runtime.FuncForPC(reflect.ValueOf(d).Pointer())
	return fn != nil && strings.HasPrefix(fn.Name(), "github.com/redis/go-redis/v9.") && strings.Contains(fn.Name(), "NewDialer.func")
}

// userHooks runs the hooks a caller added to its client with AddHook
// (tracing, metrics: redisotel) around the commands of the client New makes
// from that client's options (fitForLocking): go-redis gives no way to read
// a client's hooks, and its WithTimeout clone drops them. On the lock's
// client, it passes each command and pipeline to a Conn of the caller's
// client, whose hooks are the caller's with the relay (a userHooks without
// a Conn) innermost; the relay hands the command back to the lock's client,
// carried in the context, so it runs on the lock's own connections. The Conn
// never sends anything itself; dials do not pass the caller's dial hooks.
type userHooks struct{ conn *redis.Conn }

// nextKey carries the lock's client's own next step (a redis.ProcessHook or
// a redis.ProcessPipelineHook) through the caller's hooks to the relay.
type nextKey struct{}

// errNoRelay is a command that reached the caller's Conn without the lock's
// client's next step: never sent.
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
