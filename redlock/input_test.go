package redlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/redisurl"
)

// lockNodeClient is a client to addr with the settings New uses as given.
func lockNodeClient(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DB: db, MaxRetries: -1, DialerRetries: 1})
}

func TestNewRejectsBadNodes(t *testing.T) {
	a := lockNodeClient("127.0.0.1:1", 0)
	b := lockNodeClient("127.0.0.1:2", 0)
	sameAsA := lockNodeClient("127.0.0.1:1", 0)
	otherDB := lockNodeClient("127.0.0.1:1", 1)
	t.Cleanup(func() { a.Close(); b.Close(); sameAsA.Close(); otherDB.Close() })
	cases := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"nil client", []redis.UniversalClient{a, nil}, nil, "node 1 is a nil client"},
		{"same client twice", []redis.UniversalClient{a, b, a}, nil, "node 2 (127.0.0.1:1) is the same node as node 0"},
		{"same address twice", []redis.UniversalClient{a, sameAsA}, nil, "node 1 (127.0.0.1:1) is the same node as node 0"},
		{"zero node timeout", []redis.UniversalClient{a}, []Option{WithNodeTimeout(0)}, "node timeout must be positive"},
		{"drift too large", []redis.UniversalClient{a}, []Option{WithDriftFactor(0.7)}, "drift factor must be in [0, 0.5)"},
		{"retry range", []redis.UniversalClient{a}, []Option{WithRetryDelay(time.Second, time.Millisecond)}, "retry delay range"},
		{"negative batch window", []redis.UniversalClient{a}, []Option{withBatchWindow(-time.Microsecond)}, "batch window must be in [0, node timeout/4 = 12.5ms], got -1µs"},
		{"batch window past the node timeout", []redis.UniversalClient{a}, []Option{WithNodeTimeout(20 * time.Millisecond), withBatchWindow(6 * time.Millisecond)}, "batch window must be in [0, node timeout/4 = 5ms], got 6ms"},
		{"nil option", []redis.UniversalClient{a}, []Option{nil}, "nil option"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.nodes, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	c, err := New([]redis.UniversalClient{a, otherDB})
	if err != nil {
		t.Fatalf("two databases of one server are distinct keyspaces: %v", err)
	}
	c.Close()
}

// TestDefaultBatchWindowFitsTheNodeTimeout: the default window (1ms) never
// makes a short node timeout a bad configuration; it shrinks to a quarter of
// it, while an explicit window that does not fit is refused (above).
func TestDefaultBatchWindowFitsTheNodeTimeout(t *testing.T) {
	a := lockNodeClient("127.0.0.1:1", 0)
	t.Cleanup(func() { a.Close() })
	for _, tc := range []struct {
		timeout, want time.Duration
	}{{defaultNodeTimeout, time.Millisecond}, {2 * time.Millisecond, 500 * time.Microsecond}} {
		c, err := New([]redis.UniversalClient{a}, WithNodeTimeout(tc.timeout))
		if err != nil {
			t.Fatalf("node timeout %v: %v", tc.timeout, err)
		}
		got := c.nodes[0].Window
		c.Close()
		if got != tc.want {
			t.Errorf("node timeout %v: batch window %v, want %v", tc.timeout, got, tc.want)
		}
	}
}

func TestCallsRejectBadInput(t *testing.T) {
	// Real time: a generous node timeout for the calls that do reach the nodes.
	c, _ := memClient(t, 3, WithNodeTimeout(500*time.Millisecond))
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"empty resource", func() error { _, err := c.TryAcquire(ctx, "", time.Second); return err }, "empty resource"},
		{"empty resource acquire", func() error { _, err := c.Acquire(ctx, "", time.Second); return err }, "empty resource"},
		{"zero ttl", func() error { _, err := c.TryAcquire(ctx, "r", 0); return err }, "ttl must be positive"},
		{"negative ttl", func() error { _, err := c.Acquire(ctx, "r", -time.Second); return err }, "ttl must be positive"},
		{"ttl below timeout", func() error { _, err := c.TryAcquire(ctx, "r", 40*time.Millisecond); return err }, "ttl 40ms is too small"},
		{"nil run func", func() error { return c.Run(ctx, "r", time.Second, nil) }, "nil function"},
		{"inspect empty", func() error { _, err := c.Inspect(ctx, ""); return err }, "empty resource"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	l, err := c.TryAcquire(ctx, "r", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Millisecond); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Extend with a tiny ttl: %v", err)
	}
	_ = l.Release(ctx)
}

func TestNewFromURLsRejectsBadURLsWithoutLeakingPasswords(t *testing.T) {
	const secret = "s3cr3t-pw"
	cases := []struct {
		name string
		urls []string
		want string
	}{
		{"none", nil, "no node URLs"},
		{"bad scheme", []string{"http://u:" + secret + "@127.0.0.1:6379"}, "scheme must be redis:// or rediss://"},
		{"unparseable", []string{"redis://u:" + secret + "@127.0.0.1:port"}, `node 0: redlock: invalid argument: URL redis://…127.0.0.1:port: port "port"`},
		{"no host", []string{"redis://"}, "has no host"},
		{"bad db", []string{"redis://127.0.0.1:1/x", "redis://:" + secret + "@127.0.0.1:2/db"}, "node 0"},
		{"duplicate", []string{"redis://127.0.0.1:1", "redis://:" + secret + "@127.0.0.1:1"}, "node 1 (127.0.0.1:1) is the same node as node 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewFromURLs(tc.urls)
			if err == nil {
				c.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrInvalid naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error leaks the password: %q", err)
			}
		})
	}
	// TLS and credentials are accepted and kept.
	o, err := redisurl.ParseNode("rediss://worker:" + secret + "@redis.example:6380/2")
	if err != nil {
		t.Fatal(err)
	}
	if o.TLSConfig == nil || o.Username != "worker" || o.Password != secret || o.DB != 2 || o.Addr != "redis.example:6380" {
		t.Fatalf("parsed %+v", o)
	}
}

func TestClosedClientRefusesCalls(t *testing.T) {
	c, _ := memClient(t, 3)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(context.Background(), "r", time.Second); !errors.Is(err, errClosed) {
		t.Fatalf("got %v, want errClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPingNodesReportsEachNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // virtual time: a 20ms node timeout cannot flake
		c, mems := memClient(t, 5, WithNodeTimeout(20*time.Millisecond))
		down := func() (n int) {
			st, err := c.Admin().Ping(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range st {
				var ne *NodeError
				if s.Err != nil && (!errors.As(s.Err, &ne) || ne.Op != "ping" || ne.Node != s.Node) {
					t.Fatalf("node %d: %v, want a *NodeError of the ping", s.Node, s.Err)
				}
				if s.Err != nil {
					n++
				}
			}
			return n
		}
		if n := down(); n != 0 {
			t.Fatalf("%d nodes down, want 0", n)
		}
		mems[0].set(func(m *memNode) { m.err = errMemDown })
		mems[1].set(func(m *memNode) { m.err = errMemDown })
		if n := down(); n != 2 {
			t.Fatalf("%d nodes down, want 2", n)
		}
		mems[2].set(func(m *memNode) { m.hang = true })
		if n := down(); n != 3 {
			t.Fatalf("%d nodes down with one hanging, want 3", n)
		}
	})
}

func TestNewFromURLsTunesClientsForLocking(t *testing.T) {
	c, err := NewFromURLs([]string{"redis://127.0.0.1:1", "redis://127.0.0.1:2?protocol=3&read_timeout=1s"},
		WithNodeTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tuned, asked := c.owned[0].(*redis.Client).Options(), c.owned[1].(*redis.Client).Options()
	if tuned.Protocol != 2 || tuned.MaxRetries != 0 || tuned.ReadTimeout != 200*time.Millisecond || !tuned.ContextTimeoutEnabled {
		t.Fatalf("tuned options: protocol %d, max retries %d, read timeout %v, context timeouts %v; want 2, 0 (no retries), 200ms, true",
			tuned.Protocol, tuned.MaxRetries, tuned.ReadTimeout, tuned.ContextTimeoutEnabled)
	}
	if asked.Protocol != 3 || asked.ReadTimeout != time.Second {
		t.Fatalf("the URL's own protocol=3 and read_timeout=1s became %d and %v", asked.Protocol, asked.ReadTimeout)
	}
}

// TestDefaultDialerIsRecognised: go-redis's own dialer is bound to the
// options of the client it was made for (its dial timeout), so the lock's
// client must not inherit it; a dialer of the caller's is kept.
func TestDefaultDialerIsRecognised(t *testing.T) {
	def := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	own := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { def.Close(); own.Close() })
	if !isDefaultDialer(def.Options().Dialer) {
		t.Error("go-redis's default dialer not recognised")
	}
	if isDefaultDialer(own.Options().Dialer) || isDefaultDialer(nil) {
		t.Error("a caller's dialer (or none) taken for go-redis's default")
	}
}
