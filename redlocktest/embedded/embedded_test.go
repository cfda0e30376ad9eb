package embedded

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// client returns a go-redis client to s, closed at cleanup, and a context
// bounding the test's calls.
func client(t *testing.T, s *Server) (*redis.Client, context.Context) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

func TestStartAddrAndURL(t *testing.T) {
	s := StartT(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.URL() != "redis://"+s.Addr() {
		t.Errorf("Addr %q, URL %q", s.Addr(), s.URL())
	}
	if s.Miniredis() == nil || s.Miniredis().Addr() != s.Addr() {
		t.Error("Miniredis() does not match the server")
	}
	c, ctx := client(t, s)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestKeysExpireInRealTime(t *testing.T) {
	s := StartT(t)
	c, ctx := client(t, s)
	if err := c.Set(ctx, "short", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "short").Result(); err != nil || got != "v" {
		t.Fatalf("GET right after SET PX 100 = %q, %v", got, err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.Get(ctx, "short").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET 300ms after SET PX 100: %v; want redis.Nil", err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after expiry = %d, %v; want 0", n, err)
	}
}

func TestTTLRunsDownWithoutExpiringEarly(t *testing.T) {
	s := StartT(t)
	c, ctx := client(t, s)
	const ttl, wait = 5 * time.Second, 150 * time.Millisecond
	if err := c.Set(ctx, "long", "v", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(wait)
	pttl, err := c.PTTL(ctx, "long").Result()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// The TTL ran down by at least the time slept, and by no more than the
	// time elapsed around the sleep (plus clock granularity).
	if pttl > ttl-wait || pttl < ttl-elapsed-10*time.Millisecond {
		t.Errorf("PTTL after %v (sleep %v) = %v, want about %v", elapsed, wait, pttl, ttl-wait)
	}
	if got, err := c.Get(ctx, "long").Result(); err != nil || got != "v" {
		t.Errorf("GET before the TTL = %q, %v", got, err)
	}
}

func TestTimeIsWallClock(t *testing.T) {
	s := StartT(t)
	c, ctx := client(t, s)
	got, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(got); d < -time.Second || d > time.Second {
		t.Errorf("TIME = %v, %v away from the wall clock", got, d)
	}
	time.Sleep(20 * time.Millisecond)
	later, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !later.After(got) {
		t.Errorf("TIME did not advance: %v then %v", got, later)
	}
}

// lockScript exercises, from Lua, the commands a lock implementation needs.
var lockScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return redis.error_reply('LOCKED held by someone else')
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local now = redis.call('TIME')
local receivers = redis.call('PUBLISH', ARGV[4], ARGV[1])
return {redis.call('PTTL', KEYS[1]), tonumber(now[1]), tonumber(now[2]), receivers}
`)

func TestLuaScriptCommands(t *testing.T) {
	s := StartT(t)
	c, ctx := client(t, s)
	sub := c.Subscribe(ctx, "events")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}

	// SCRIPT LOAD then EVALSHA.
	if err := lockScript.Load(ctx, c).Err(); err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	res, err := lockScript.EvalSha(ctx, c, []string{"lock"}, "token-1", 100, 2000, "events").Slice()
	if err != nil {
		t.Fatalf("EVALSHA: %v", err)
	}
	ints := make([]int64, len(res))
	for i, v := range res {
		n, ok := v.(int64)
		if !ok {
			t.Fatalf("script returned %#v, want integers", res)
		}
		ints[i] = n
	}
	if len(ints) != 4 {
		t.Fatalf("script returned %v, want 4 integers", ints)
	}
	if pttl := ints[0]; pttl <= 100 || pttl > 2000 {
		t.Errorf("PTTL after PEXPIRE 2000 = %d", pttl)
	}
	now := time.Unix(ints[1], ints[2]*1000)
	if d := time.Since(now); d < -time.Second || d > time.Second {
		t.Errorf("TIME in a script = %v, %v away from the wall clock", now, d)
	}
	if n := ints[3]; n != 1 {
		t.Errorf("PUBLISH from a script reached %d subscribers, want 1", n)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "events" || msg.Payload != "token-1" {
		t.Errorf("message published by the script = %+v, %v", msg, err)
	}

	// SET NX fails while the key exists: EVAL (Run falls back from EVALSHA).
	err = lockScript.Run(ctx, c, []string{"lock"}, "token-2", 100, 2000, "events").Err()
	if err == nil || !strings.Contains(err.Error(), "LOCKED") {
		t.Errorf("second acquisition: %v; want the LOCKED error", err)
	}
	if got, err := c.Get(ctx, "lock").Result(); err != nil || got != "token-1" {
		t.Errorf("lock value = %q, %v; want token-1", got, err)
	}
}

func TestCloseStopsServingAndIsIdempotent(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := client(t, s)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING succeeded after Close")
	}
}

func TestStartNServesDistinctNodesUntilStopped(t *testing.T) {
	urls, stop, err := StartN(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var clients []*redis.Client
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, time.Second
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		seen[u] = true
		clients = append(clients, c)
	}
	if len(seen) != 3 {
		t.Fatalf("URLs %v, want 3 distinct servers", urls)
	}
	stop()
	for i, c := range clients {
		if err := c.Ping(context.Background()).Err(); err == nil {
			t.Fatalf("server %d still answers after stop", i)
		}
	}
}

// TestCoarseExpiryExpiresKeys: with WithCoarseExpiry, keys still expire by
// themselves (within a few ticks, however loaded the machine: the test waits
// up to a minute), and a long key keeps its TTL. How early a key may expire
// depends on how late the ticker runs, so it is not asserted.
func TestCoarseExpiryExpiresKeys(t *testing.T) {
	s, err := Start(WithCoarseExpiry(10 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, ctx := client(t, s)
	start := time.Now()
	if err := c.Set(ctx, "short", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "long", "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for c.Exists(ctx, "short").Val() == 1 {
		if time.Since(start) > time.Minute {
			t.Fatal("a 100ms key still exists after a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pttl := c.PTTL(ctx, "long").Val(); pttl <= 0 || pttl > time.Hour {
		t.Errorf("PTTL of a 1h key = %v", pttl)
	}
	s.Close() // stops the ticker; a second Close (cleanup) is harmless
}
