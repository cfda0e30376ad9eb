package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Timeouts of the clients made by ClientOptions: short, so that a fault
// shows up quickly, but long enough for a loaded CI machine.
const (
	// ClientDialTimeout bounds one dial.
	ClientDialTimeout = 100 * time.Millisecond
	// ClientReadTimeout bounds waiting for one reply.
	ClientReadTimeout = 500 * time.Millisecond
	// ClientWriteTimeout bounds writing one command.
	ClientWriteTimeout = 500 * time.Millisecond
)

// ClientOptions returns the options of the clients made by Client, for
// tests that need to adjust them: fail-fast timeouts (see ClientDialTimeout
// and the other constants), a single dial attempt, no command retries,
// context deadlines applied to the socket, and no CLIENT SETINFO or
// maintenance notifications on connect (redis-server 7.0 knows neither).
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		DialTimeout:           ClientDialTimeout,
		DialerRetries:         1,
		ReadTimeout:           ClientReadTimeout,
		WriteTimeout:          ClientWriteTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              8,
		PoolTimeout:           time.Second,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// Client returns a go-redis client to addr with ClientOptions, closed by
// tb.Cleanup.
func Client(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	c := redis.NewClient(ClientOptions(addr))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a client to the node's proxy address, as Client does.
func (n *Node) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	return Client(tb, n.Addr())
}
