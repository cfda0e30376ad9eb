package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newSetupClient is a client for set-up commands, patient enough for a
// loaded machine.
func newSetupClient(addr string) *redis.Client {
	o := ClientOptions(addr)
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 2*time.Second, 5*time.Second, 5*time.Second
	return redis.NewClient(o)
}

// StartSentinel starts a redis-server in Sentinel mode monitoring master
// (at masterAddr, authenticated with masterPassword when not empty) under
// the name name; with password not empty the sentinel itself requires it.
// It returns the sentinel's address, and stops it by tb.Cleanup.
func StartSentinel(tb testing.TB, name, masterAddr, masterPassword, password string) string {
	tb.Helper()
	bin := RequireServer(tb)
	host, port, _ := strings.Cut(masterAddr, ":")
	for attempt := 0; ; attempt++ {
		sport, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		dir := filepath.Join(tb.TempDir(), "sentinel")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
		conf := fmt.Sprintf("port %d\nbind %s\ndir %s\nsentinel monitor %s %s %s 1\n", sport, loopback, dir, name, host, port)
		if masterPassword != "" {
			conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, masterPassword)
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
		p, err := launch(bin, dir, sport, []string{path, "--sentinel", "--daemonize", "no", "--loglevel", "warning"}, nil)
		if err != nil {
			if attempt < portAttempts {
				continue
			}
			tb.Fatalf("redistest: start sentinel: %v", err)
		}
		tb.Cleanup(func() { _ = p.kill() })
		addr := fmt.Sprintf("%s:%d", loopback, sport)
		if password != "" {
			c := newSetupClient(addr)
			defer c.Close()
			if err := c.Do(context.Background(), "acl", "setuser", "default", "on", "resetpass", ">"+password).Err(); err != nil {
				tb.Fatalf("redistest: set the sentinel's password: %v", err)
			}
		}
		return addr
	}
}

// StartRedisCluster starts n redis-server masters in cluster mode, assigns
// them the 16384 slots in equal ranges, and waits until the cluster state
// is ok. It returns their addresses (no proxies: the cluster redirects
// clients to the servers' own addresses) and stops them by tb.Cleanup.
func StartRedisCluster(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		s := StartServer(tb, WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"))
		addrs[i] = s.Addr()
	}
	formCluster(tb, addrs)
	return addrs
}

// LockClusterURL is the lock-node URL of a Redis Cluster started by
// StartRedisCluster: redis-cluster://first?addr=second&addr=..., one node in
// a comma-separated REDLOCK_NODES.
func LockClusterURL(addrs []string) string {
	u := "redis-cluster://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// StartLockClusters starts n Redis Clusters of shards masters each, the lock
// nodes of a Redlock over clusters, and returns their LockClusterURLs and
// each cluster's master addresses.
func StartLockClusters(tb testing.TB, n, shards int) (urls []string, addrs [][]string) {
	tb.Helper()
	for range n {
		a := StartRedisCluster(tb, shards)
		addrs = append(addrs, a)
		urls = append(urls, LockClusterURL(a))
	}
	return urls, addrs
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() error { return s.proc.kill() }

// StartReplicatedCluster starts a Redis Cluster of n masters, each with one
// replica, that fails a dead master over within a few seconds
// (cluster-node-timeout 1s). It returns the masters and replicas[i], the
// replica of masters[i]; all are stopped by tb.Cleanup.
func StartReplicatedCluster(tb testing.TB, n int) (masters, replicas []*Server) {
	tb.Helper()
	// Validity factor 0: a replica takes over however long ago it last
	// heard from its master, so a test's failover never waits on data age.
	// Diskless sync delay 0: a master sends its replica the first sync at
	// once instead of waiting 5s for more replicas to share it.
	args := WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
		"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0")
	for range n {
		masters = append(masters, StartServer(tb, args))
		replicas = append(replicas, StartServer(tb, args))
	}
	addrs := make([]string, n)
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	formCluster(tb, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := newSetupClient(addrs[0])
	defer first.Close()
	for i, r := range replicas {
		if err := first.Do(ctx, "cluster", "meet", loopback, r.Port).Err(); err != nil {
			tb.Fatalf("redistest: cluster meet %s: %v", r.Addr(), err)
		}
		mc, rc := newSetupClient(addrs[i]), newSetupClient(r.Addr())
		id, err := mc.Do(ctx, "cluster", "myid").Text()
		_ = mc.Close()
		for err == nil {
			// The replica must know the master before it can follow it.
			if err = rc.Do(ctx, "cluster", "replicate", id).Err(); err == nil || ctx.Err() != nil {
				break
			}
			err = nil
			time.Sleep(50 * time.Millisecond)
		}
		_ = rc.Close()
		if err != nil {
			tb.Fatalf("redistest: %s replicate %s: %v", r.Addr(), addrs[i], err)
		}
	}
	waitClusterOK(ctx, tb, append(addrs, replicaAddrs(replicas)...), 2*n)
	for _, r := range replicas {
		waitInfo(ctx, tb, r.Addr(), "replication", "master_link_status:up")
	}
	return masters, replicas
}

// waitInfo waits until the INFO section of the server at addr contains
// want, failing tb when ctx ends first.
func waitInfo(ctx context.Context, tb testing.TB, addr, section, want string) {
	tb.Helper()
	c := newSetupClient(addr)
	defer c.Close()
	for {
		info, err := c.Info(ctx, section).Result()
		if err == nil && strings.Contains(info, want) {
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("redistest: %s: no %q in INFO %s in time: %v", addr, want, section, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func replicaAddrs(rs []*Server) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Addr()
	}
	return out
}

// formCluster shares the 16384 slots among the servers at addrs in equal
// ranges, introduces them to each other, and waits until every one sees
// them all and the cluster state ok.
func formCluster(tb testing.TB, addrs []string) {
	tb.Helper()
	n := len(addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, n)
	for i, a := range addrs {
		clients[i] = newSetupClient(a)
		defer clients[i].Close()
	}
	per := 16384 / n
	for i, c := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == n-1 {
			hi = 16383
		}
		if err := c.Do(ctx, "cluster", "addslotsrange", lo, hi).Err(); err != nil {
			tb.Fatalf("redistest: cluster addslotsrange on %s: %v", addrs[i], err)
		}
		if i > 0 {
			p, _ := strconv.Atoi(addrs[i][strings.LastIndex(addrs[i], ":")+1:])
			if err := clients[0].Do(ctx, "cluster", "meet", loopback, p).Err(); err != nil {
				tb.Fatalf("redistest: cluster meet %s: %v", addrs[i], err)
			}
		}
	}
	waitClusterOK(ctx, tb, addrs, n)
}

// waitClusterOK waits until every server at addrs reports the cluster state
// ok with known nodes, failing tb when ctx ends first.
func waitClusterOK(ctx context.Context, tb testing.TB, addrs []string, known int) {
	tb.Helper()
	for _, a := range addrs {
		c := newSetupClient(a)
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", known)) {
				break
			}
			if ctx.Err() != nil {
				_ = c.Close()
				tb.Fatalf("redistest: cluster not ok in time at %s: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
}
