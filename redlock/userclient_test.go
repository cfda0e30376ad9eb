package redlock

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// countHook counts the commands and pipelines a client sends through it.
type countHook struct{ cmds atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestNewTakesDefaultClients: clients made with go-redis's defaults (3
// command retries, 5 dial attempts of 5s, 3s reads) or with no read timeout
// are taken; the lock's calls go through clients of its own with the
// settings that keep a dead node's cost near the node timeout, closed by
// Close, while the caller's clients stay open and untouched; a client
// already fit is used as given. The hooks added to the callers' clients
// (tracing, metrics) see the lock's commands either way.
func TestNewTakesDefaultClients(t *testing.T) {
	srvs := []*redistest.Server{redistest.StartServer(t), redistest.StartServer(t), redistest.StartServer(t)}
	def := redis.NewClient(&redis.Options{Addr: srvs[0].Addr()})
	noTimeout := redis.NewClient(&redis.Options{Addr: srvs[1].Addr(), MaxRetries: -1, DialerRetries: 1, ReadTimeout: -1})
	good := lockNodeClient(srvs[2].Addr(), 0)
	users := []*redis.Client{def, noTimeout, good}
	hooks := []*countHook{{}, {}, {}}
	for i, u := range users {
		u.AddHook(hooks[i])
	}
	t.Cleanup(func() { def.Close(); noTimeout.Close(); good.Close() })
	c, err := New([]redis.UniversalClient{def, noTimeout, good}, WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("New with go-redis's default settings: %v", err)
	}
	for i, n := range c.nodes {
		o := n.Client.(*redis.Client).Options()
		if unfitForLocking(n.Client) {
			t.Errorf("node %d: the lock's client is unfit: retries %d, dials %d, read %v, write %v",
				i, o.MaxRetries, o.DialerRetries, o.ReadTimeout, o.WriteTimeout)
		}
		if i < 2 && (o.DialTimeout > 400*time.Millisecond || o.ReadTimeout > 400*time.Millisecond) {
			t.Errorf("node %d: dial %v, read %v; want at most 4 node timeouts", i, o.DialTimeout, o.ReadTimeout)
		}
		if (i < 2) == (n.Client == redis.UniversalClient(users[i])) {
			t.Errorf("node %d: used the caller's client as given: %v", i, i == 2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before [3]int64
	for i, h := range hooks {
		before[i] = h.cmds.Load()
	}
	// Acquire, not TryAcquire: on a loaded machine the first dial may take
	// longer than the 100ms node timeout; the clients must work, not be fast.
	l, err := c.Acquire(ctx, "default-clients", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range srvs { // a node past the quorum may answer after Acquire returned
		raw := redistest.Client(t, s.Addr()) // no hook of the caller's sees these reads
		for tok := ""; tok != l.Token(); tok, _ = raw.Get(ctx, keyOf(c.cfg.prefix, "default-clients")).Result() {
			if ctx.Err() != nil {
				t.Fatalf("node %d holds %q, want the token", i, tok)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, h := range hooks {
		if h.cmds.Load() == before[i] {
			t.Errorf("node %d: the hook added to the caller's client saw none of the lock's commands", i)
		}
	}
	if o := def.Options(); o.MaxRetries != 3 || o.DialerRetries != 5 {
		t.Errorf("the caller's options changed: max retries %d, dial attempts %d; want 3, 5", o.MaxRetries, o.DialerRetries)
	}
	for i, u := range users {
		if err := u.Ping(ctx).Err(); err != nil {
			t.Errorf("the caller's client %d no longer works after Close: %v", i, err)
		}
	}
}

// TestUsersClientBoundedOnSilentNode: a node that accepts connections and
// never answers costs the lock's client for one with no read timeout its
// I/O timeout, where the caller's client, asked the same, waits for as long
// as the node stays silent (the control).
func TestUsersClientBoundedOnSilentNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, cn) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, cn := range conns {
			cn.Close()
		}
	})
	user := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { user.Close() })
	view := fitForLocking(user, 50*time.Millisecond)
	if view == nil {
		t.Fatal("a client with no read timeout was found fit")
	}
	userDone := make(chan error, 1)
	go func() { userDone <- user.Ping(context.Background()).Err() }()
	done := make(chan error, 1)
	go func() { done <- view.Ping(context.Background()).Err() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a silent node answered the lock's ping")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lock's client still waits for a silent node after 30s")
	}
	select {
	case err := <-userDone:
		t.Fatalf("control: the caller's client with no read timeout returned (%v): the silent node proves nothing", err)
	default:
	}
}
