package lockutil

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestAddrNeverShowsCredentials: a client's address names its server(s)
// without the user or password it dials with.
func TestAddrNeverShowsCredentials(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390", Username: "app", Password: "s3cret"})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Password: "s3cret"})
	t.Cleanup(func() { _ = c.Close(); _ = cc.Close() })
	for _, tc := range []struct {
		c    redis.UniversalClient
		want string
	}{{c, "127.0.0.1:6390"}, {cc, "127.0.0.1:7000,127.0.0.1:7001"}, {nil, ""}} {
		got := Addr(tc.c)
		if got != tc.want || strings.Contains(got, "s3cret") {
			t.Errorf("Addr = %q, want %q", got, tc.want)
		}
	}
}
