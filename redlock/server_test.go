package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// serverClient returns a Client over one redis-server and a raw go-redis
// client to the same server. Its node timeout is a generous second (opts may override it): these tests are not
// about timing, and a loaded machine under -race can take longer than the
// default 50ms to answer.
func serverClient(t *testing.T, opts ...Option) (*Client, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	c, err := NewFromURLs([]string{srv.URL()}, append([]Option{WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, raw
}

// runScript runs one of the package's scripts the way the client does.
func runScript(t *testing.T, raw *redis.Client, s *transport.Script, keys []string, argv ...any) int64 {
	t.Helper()
	args := scriptArgs(s, keys, argv...)
	args[0], args[1] = "eval", s.Src
	n, err := raw.Do(context.Background(), args...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestScriptsRequireTheRightToken: release and extend act only for the
// token that holds the key.
func TestScriptsRequireTheRightToken(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	l, err := c.TryAcquire(ctx, "sku-42", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	k := c.keysFor("sku-42")
	if got := raw.Get(ctx, k.key).Val(); got != l.Token() {
		t.Fatalf("key holds %q, want the lock's token", got)
	}
	if n := runScript(t, raw, releaseScript, k.lockKeys(), "wrong-token", ""); n != 0 {
		t.Fatal("release with a wrong token deleted the key")
	}
	if n := runScript(t, raw, extendScript, k.lockKeys(), "wrong-token", 60000); n != 0 {
		t.Fatal("extend with a wrong token succeeded")
	}
	if ttl := raw.PTTL(ctx, k.key).Val(); ttl > 5*time.Second {
		t.Fatalf("TTL %v after a wrong-token extend", ttl)
	}
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := raw.PTTL(ctx, k.key).Val(); ttl <= 5*time.Second {
		t.Fatalf("TTL %v after Extend(30s)", ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if raw.Exists(ctx, k.key).Val() != 0 {
		t.Fatal("key left after Release")
	}
	// Extend of a key that is gone never re-creates it.
	if n := runScript(t, raw, extendScript, k.lockKeys(), l.Token(), 60000); n != 0 || raw.Exists(ctx, k.key).Val() != 0 {
		t.Fatal("extend re-created a released key")
	}
}

// TestExpiryInRealTime: a lock that is neither released nor extended
// expires at its TTL and another client gets it.
func TestExpiryInRealTime(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t, WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
	l, err := c.TryAcquire(ctx, "r", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "r", 2*time.Second); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want ErrLocked", err)
	}
	start := time.Now()
	l2, err := c.Acquire(within(t, 10*time.Second), "r", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("got the lock after %v, before the first one expired", waited)
	}
	if l2.Fence() != 0 || l2.Token() == l.Token() {
		t.Fatal("tokens must differ between holders")
	}
	_ = l2.Release(ctx)
}

// TestScriptCacheFlushFallsBackToEval: after SCRIPT FLUSH (a node restart
// loses its script cache) every script still runs.
func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	l, err := c.TryAcquire(ctx, "r", 5*time.Second, WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	l2, err := c.TryAcquire(ctx, "r", 5*time.Second, WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() != l.Fence()+1 {
		t.Fatalf("fence %d after %d on a single node", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctx)
}

// TestRunReleasesAndReportsLoss: Run releases after fn, and reports a lost
// lock as ErrLockLost even when fn itself succeeded.
func TestRunReleasesAndReportsLoss(t *testing.T) {
	ctx := context.Background()
	c, raw := serverClient(t)
	var token string
	err := c.Run(ctx, "job", 2*time.Second, func(ctx context.Context) error {
		states, err := c.Inspect(ctx, "job")
		if err != nil {
			return err
		}
		token = states[0].Token
		return nil
	})
	if err != nil || token == "" {
		t.Fatalf("Run: %v (holder %q)", err, token)
	}
	if raw.Exists(ctx, c.keysFor("job").key).Val() != 0 {
		t.Fatal("Run did not release")
	}
	sentinel := errors.New("handler failed")
	if err := c.Run(ctx, "job", 2*time.Second, func(context.Context) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Run returned %v, want the function's error", err)
	}
	err = c.Run(ctx, "job", 2*time.Second, func(ctx context.Context) error {
		raw.Del(ctx, c.keysFor("job").key) // the data is wiped under the holder
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Run with the lock wiped: %v, want ErrLockLost", err)
	}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
