package redlock

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// userHooks runs the hooks a caller added to its client with AddHook
// (tracing, metrics: redisotel) around the commands of the client New makes
// from that client's options (fitForLocking), which has none of them:
// go-redis gives no way to read a client's hooks, and its WithTimeout clone
// drops them. Added to the lock's client, it passes each command and
// pipeline to a Conn of the caller's client, whose hooks are a copy of the
// caller's with relay innermost; relay hands the command back to the lock's
// client, carried in the context, so it runs on the lock's own connections
// and settings. The Conn never sends anything itself. Dials are the lock's
// client's and do not pass the caller's dial hooks.
type userHooks struct{ conn *redis.Conn }

// withUserHooks returns user's hooks as a hook for the lock's client.
func withUserHooks(user *redis.Client) userHooks {
	conn := user.Conn()
	conn.AddHook(relay{})
	return userHooks{conn: conn}
}

// nextCmd and nextPipe carry the lock's client's own next step through the
// caller's hooks to relay.
type (
	nextCmd  struct{}
	nextPipe struct{}
)

// DialHook leaves the lock's client's dials as they are.
func (userHooks) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs one command through the caller's hooks.
func (h userHooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.conn.Process(context.WithValue(ctx, nextCmd{}, next), cmd)
	}
}

// ProcessPipelineHook runs one pipeline through the caller's hooks.
func (h userHooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pipe := h.conn.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd) // queues it
		}
		_, err := pipe.Exec(context.WithValue(ctx, nextPipe{}, next))
		return err
	}
}

// errNoRelay is a command that reached the caller's Conn without the lock's
// client's next step: never sent.
var errNoRelay = errors.New("redlock: a command reached the caller's client outside the lock's")

// relay, innermost of the caller's hooks on the Conn, hands each command
// back to the lock's client instead of sending it on the Conn.
type relay struct{}

func (relay) DialHook(next redis.DialHook) redis.DialHook { return next }

func (relay) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		next, ok := ctx.Value(nextCmd{}).(redis.ProcessHook)
		if !ok {
			return errNoRelay
		}
		return next(ctx, cmd)
	}
}

func (relay) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		next, ok := ctx.Value(nextPipe{}).(redis.ProcessPipelineHook)
		if !ok {
			return errNoRelay
		}
		return next(ctx, cmds)
	}
}
