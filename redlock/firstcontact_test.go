package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// newFromURLs is NewFromURLs with a node timeout that a loaded machine
// meets; it closes what it built.
func newFromURLs(t *testing.T, urls ...string) error {
	t.Helper()
	c, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err == nil {
		_ = c.Close()
	}
	return err
}

// TestNewFromURLsRefusesOneServerTwice: two spellings of one server
// (localhost and 127.0.0.1, or two databases) are one vote, whatever the
// URLs say: NewFromURLs compares run IDs on first contact and refuses,
// naming both URLs. Distinct servers, and a node that does not answer yet,
// pass.
func TestNewFromURLsRefusesOneServerTwice(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	a := nodes.Nodes[0].Addr()
	_, port, _ := strings.Cut(a, ":")
	for _, urls := range [][]string{
		{"redis://" + a, "redis://localhost:" + port, nodes.Nodes[1].URL()},
		{"redis://" + a + "/0", "redis://" + a + "/1", nodes.Nodes[1].URL()},
	} {
		err := newFromURLs(t, urls...)
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Fatalf("%v: %v, want ErrInvalid", urls, err)
		}
		for _, want := range []string{"node 0 (" + urls[0] + ")", "node 1 (" + urls[1] + ")", "same run_id"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	if err := newFromURLs(t, append(nodes.URLs(), "redis://"+redistest.ClosedAddr(t))...); err != nil {
		t.Fatalf("distinct nodes and one down: %v", err)
	}
}

// TestNewFromURLsRefusesWhatNoRetryCures: a wrong password, none where one
// is needed, an ACL user who may not run the lock's scripts and a Redis
// Cluster member given as a single server are refused at once, naming the
// node and the cause, never the password.
func TestNewFromURLsRefusesWhatNoRetryCures(t *testing.T) {
	const secret = "s3cret-Pw"
	good := redistest.StartCluster(t, 2)
	locked := redistest.StartServer(t, redistest.WithPassword("right-one"))
	acl := redistest.StartNode(t)
	ctx := context.Background()
	if err := acl.Client(t).Do(ctx, "ACL", "SETUSER", "noscript", "on", ">"+secret, "~*", "&*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	member := redistest.StartRedisCluster(t, 3)[0]
	for _, tc := range []struct {
		name, url, want string
	}{
		{"wrong password", "redis://:" + secret + "@" + locked.Addr(), "WRONGPASS"},
		{"no password", "redis://" + locked.Addr(), "NOAUTH"},
		{"acl denial", "redis://noscript:" + secret + "@" + acl.Addr(), "NOPERM"},
		{"password the node lacks", "redis://:" + secret + "@" + acl.Addr(), "node has none configured"},
		{"cluster member", "redis://" + member, "cluster_enabled:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newFromURLs(t, append(good.URLs(), tc.url)...)
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Fatalf("%v, want ErrInvalid", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "node 2 (") || !strings.Contains(msg, tc.want) || strings.Contains(msg, secret) {
				t.Fatalf("error %q: want node 2, %q, and no password", msg, tc.want)
			}
		})
	}
}
