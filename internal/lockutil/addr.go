package lockutil

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Addr names the server(s) a Redis client talks to, for logs and errors,
// never with credentials: "" when the client's type is not one of go-redis's.
func Addr(c redis.UniversalClient) string {
	switch cl := c.(type) {
	case *redis.Client:
		return cl.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(cl.Options().Addrs, ",")
	case *redis.Ring:
		addrs := make([]string, 0, len(cl.Options().Addrs))
		for _, a := range cl.Options().Addrs {
			addrs = append(addrs, a)
		}
		return strings.Join(addrs, ",")
	}
	return ""
}
