package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SpreadNames returns names "<prefix>0", "<prefix>1"... enough that, for
// every cluster of addrs (the masters of each, as StartLockClusters returns
// them), each master holds the slot of key(name) for at least one of them:
// resources whose lock keys land on every shard of every lock node.
func SpreadNames(tb testing.TB, addrs [][]string, prefix string, key func(name string) string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	missing := map[string]bool{}
	var ccs []*redis.ClusterClient
	for _, a := range addrs {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: a})
		defer cc.Close()
		ccs = append(ccs, cc)
		for _, m := range a {
			missing[m] = true
		}
	}
	var names []string
	for i := 0; len(missing) > 0; i++ {
		if i == 1024 {
			tb.Fatalf("redistest: no names of %d land on masters %v", i, missing)
		}
		name, useful := fmt.Sprintf("%s%d", prefix, i), false
		for _, cc := range ccs {
			m, err := cc.MasterForKey(ctx, key(name))
			if err != nil {
				tb.Fatalf("redistest: the master of %s: %v", key(name), err)
			}
			useful = useful || missing[m.Options().Addr]
			delete(missing, m.Options().Addr)
		}
		if useful {
			names = append(names, name)
		}
	}
	return names
}
