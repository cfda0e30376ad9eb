package redistest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Cluster is a set of independent redis-server masters, as used by Redlock:
// no replication and no Redis Cluster protocol between them.
type Cluster struct {
	// Nodes are the cluster's nodes, in start order.
	Nodes []*Node
}

// StartCluster starts n independent nodes concurrently, each behind its own
// proxy, all stopped by tb.Cleanup. It skips or fails the test as
// RequireServer does when redis-server is missing.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("redistest: StartCluster needs at least one node, got %d", n)
		return nil
	}
	return startCluster(tb, RequireServer(tb), n, nil)
}

// startCluster starts n nodes of bin concurrently; clock, when not nil,
// gives node i's clock control (see StartClockCluster).
func startCluster(tb testing.TB, bin string, n int, clock func(i int, dir string) (*fakeClock, error)) *Cluster {
	tb.Helper()
	base := tb.TempDir()

	nodes := make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			dir := filepath.Join(base, "node-"+strconv.Itoa(i))
			var fc *fakeClock
			if clock != nil {
				if fc, errs[i] = clock(i, dir); errs[i] != nil {
					return
				}
			}
			nodes[i], errs[i] = startNode(bin, dir, fc)
		})
	}
	wg.Wait()

	c := &Cluster{Nodes: make([]*Node, 0, n)}
	for _, node := range nodes {
		if node != nil {
			registerCleanup(tb, node)
			c.Nodes = append(c.Nodes, node)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("redistest: start %d-node cluster: %v", n, err)
		return nil
	}
	return c
}

// Addrs returns the nodes' proxy addresses, what clients should dial.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URLs returns the nodes' proxy addresses as "redis://127.0.0.1:port" URLs.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// Clients returns one client per node, made by Node.Client and closed by
// tb.Cleanup.
func (c *Cluster) Clients(tb testing.TB) []redis.UniversalClient {
	tb.Helper()
	clients := make([]redis.UniversalClient, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = n.Client(tb)
	}
	return clients
}

// String describes the cluster by its addresses, for test messages.
func (c *Cluster) String() string {
	return fmt.Sprint(c.Addrs())
}
