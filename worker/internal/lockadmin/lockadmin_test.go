package lockadmin

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/redis/go-redis/v9"
)

// embeddedNodes returns a Client over n embedded Redis servers, their URLs
// and a raw client to each.
func embeddedNodes(t *testing.T, n int, opts ...redlock.Option) (*redlock.Client, []string, []*redis.Client) {
	t.Helper()
	urls := make([]string, n)
	raws := make([]*redis.Client, n)
	for i := range n {
		srv := embedded.StartT(t)
		urls[i] = srv.URL()
		raws[i] = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = raws[i].Close() })
	}
	c, err := redlock.NewFromURLs(urls, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, urls, raws
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func resources(l *Listing) []string {
	var out []string
	for _, h := range l.Locks {
		out = append(out, h.Resource)
	}
	return out
}

// TestListFindsHeldLocksUnderAPrefix: List returns the locked resources
// under the client's key prefix and the resource prefix, with holder, TTL
// and fence per node; fencing counters of free resources, other prefixes
// and look-alike keys are not listed.
func TestListFindsHeldLocksUnderAPrefix(t *testing.T) {
	ctx := within(t, 20*time.Second)
	c, _, raws := embeddedNodes(t, 3, redlock.WithPrefix("a*b:"))
	for _, r := range []string{"sku-2", "sku-1", "other"} {
		if _, err := c.TryAcquire(redlock.ContextWithHolder(ctx, "task "+r), r, 10*time.Second, redlock.WithFencing()); err != nil {
			t.Fatal(err)
		}
	}
	freed, err := c.TryAcquire(ctx, "sku-3", 10*time.Second, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if err := freed.Release(ctx); err != nil { // leaves only its fence key
		t.Fatal(err)
	}
	// Keys the glob would match if the prefix's '*' were not escaped, or
	// that are not lock keys.
	raws[0].Set(ctx, "aXXb:{sku-9}", "x", time.Minute)
	raws[0].Set(ctx, "a*b:park:{sku-8}", "x", time.Minute)
	// A lock held on one node only (a minority) is still listed.
	raws[1].Set(ctx, "a*b:{sku-7}", "TOKEN|h=elsewhere&p=9", time.Minute)

	got, err := List(ctx, c, "sku-", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sku-1", "sku-2", "sku-7"}; !slices.Equal(resources(got), want) {
		t.Fatalf("listed %v, want %v", resources(got), want)
	}
	if got.Truncated || slices.ContainsFunc(got.ScanErrs, func(e error) bool { return e != nil }) {
		t.Fatalf("truncated %v, scan errors %v", got.Truncated, got.ScanErrs)
	}
	for _, st := range got.Locks[0].Nodes {
		h := st.Holder
		if h.Name != "task sku-1" || st.TTL <= 0 || st.TTL > 10*time.Second || st.Fence <= 0 {
			t.Fatalf("node state %+v (holder %+v)", st, h)
		}
	}
	if n := got.Locks[2].Nodes; n[1].Token == "" || n[0].Token != "" || n[2].Token != "" {
		t.Fatalf("sku-7 node states %+v, want held on node 1 only", n)
	}

	all, err := List(ctx, c, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"other", "sku-1"}; !slices.Equal(resources(all), want) || !all.Truncated {
		t.Fatalf("List with limit 2: %v truncated=%v, want %v truncated", resources(all), all.Truncated, want)
	}
}

// TestForceReleaseRemovesOnlyTheTokenSeen: a force release deletes the keys
// holding the given token and wakes waiters; a token that is no longer
// there deletes nothing. The holder learns of it at its next extension.
func TestForceReleaseRemovesOnlyTheTokenSeen(t *testing.T) {
	ctx := within(t, 20*time.Second)
	c, urls, _ := embeddedNodes(t, 3)
	// The waiter is another process: a second client over the same nodes
	// (a waiter in the same client would queue behind the holder locally).
	waiterClient, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiterClient.Close() })
	l, err := c.TryAcquire(ctx, "stuck", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ForceRelease(ctx, c, "stuck", "NOT-THE-TOKEN"); err != nil || n != 0 {
		t.Fatalf("force release with a stale token: %d nodes, %v; want 0, nil", n, err)
	}
	waiter := make(chan error, 1)
	go func() {
		w, err := waiterClient.Acquire(ctx, "stuck", 10*time.Second)
		if err == nil {
			err = w.Release(ctx)
		}
		waiter <- err
	}()
	if n, err := ForceRelease(ctx, c, "stuck", l.Token()); err != nil || n != 3 {
		t.Fatalf("force release: %d nodes, %v; want 3, nil", n, err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatalf("waiter after force release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never got the force-released lock")
	}
	if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("holder's extension after a force release: %v, want redlock.ErrLockLost", err)
	}
	if _, err := ForceRelease(ctx, c, "stuck", ""); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("empty token: %v, want redlock.ErrInvalid", err)
	}
}

// TestClaimsGroupNodesByToken: a split resource has one claim per token, in
// node order, with the shortest TTL and the highest fence of its nodes.
func TestClaimsGroupNodesByToken(t *testing.T) {
	a, b := "AAAA|h=w1&p=1&n=job+x", "BBBB"
	ha := redlock.Holder{Host: "w1", PID: 1, Name: "job x"}
	states := []redlock.NodeState{
		{Node: 0, Token: b, TTL: 5 * time.Second, Fence: 7},
		{Node: 1, Token: a, Holder: ha, TTL: 3 * time.Second, Fence: 4},
		{Node: 2},
		{Node: 3, Token: a, Holder: ha, TTL: 2 * time.Second, Fence: 9},
		{Node: 4, Err: errors.New("down")},
	}
	got := Claims(states)
	if len(got) != 2 {
		t.Fatalf("claims %+v, want 2", got)
	}
	if c := got[0]; c.Token != b || !slices.Equal(c.Nodes, []int{0}) || c.Holder != (redlock.Holder{}) {
		t.Fatalf("first claim %+v", c)
	}
	want := Claim{Token: a, Holder: redlock.Holder{Host: "w1", PID: 1, Name: "job x"}, Nodes: []int{1, 3}, TTL: 2 * time.Second, Fence: 9}
	if c := got[1]; c.Token != want.Token || c.Holder != want.Holder || !slices.Equal(c.Nodes, want.Nodes) || c.TTL != want.TTL || c.Fence != want.Fence {
		t.Fatalf("second claim %+v, want %+v", c, want)
	}
	if Claims(states[2:3]) != nil {
		t.Fatal("a free resource has claims")
	}
}
