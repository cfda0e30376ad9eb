package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeReport is what Admin.Check learned of one lock node: who it is, how far its
// clock is from ours, and the settings Redlock's guarantee depends on.
type NodeReport struct {
	Node    int    // index in the node list
	Addr    string // the node's address, never its credentials
	RunID   string // the server's identity (INFO server run_id); equal run IDs mean one server
	Version string // redis_version
	// RTT is the round trip of the TIME call that measured ClockOffset.
	RTT time.Duration
	// ClockOffset is the node's wall clock minus this process's, taken at the
	// midpoint of the TIME round trip; its error is at most RTT/2.
	ClockOffset time.Duration
	// Settings, from CONFIG GET; unknown ("" and 0) when ConfigErr is set.
	MaxmemoryPolicy string
	Maxmemory       int64 // bytes; 0 means no limit, so no eviction
	AppendOnly      bool
	AppendFsync     string
	// Err is the node's failure to answer TIME; nothing else is known then.
	Err error
	// ConfigErr is set when the node answered TIME but refused INFO or
	// CONFIG GET (an ACL, a renamed command, an embedded server): its
	// identity (RunID "") or its settings are unknown; its clock is known.
	ConfigErr error
	// ClusterEnabled is INFO's cluster_enabled: on a node given as a single
	// server it means a cluster member that answers MOVED for most keys.
	ClusterEnabled bool
	// Misconfigured is set, matching ErrInvalid, when the node refuses
	// this client for a reason that retrying will not fix: a wrong password
	// (WRONGPASS), none given (NOAUTH), an ACL that denies the lock's
	// commands or keys (NOPERM), a command it does not know, or a Redis
	// Cluster member given as a single server. It says what to change.
	Misconfigured error
	// SameServer lists the other nodes (indexes, ascending) that reach this
	// node's server or one of its shards (equal run IDs): one server casting
	// several votes undoes Redlock's fault tolerance. Nil while independent.
	SameServer []int
	// Shards are the reports of each master of a node that is a Redis
	// Cluster, by address (nil for a single server). The node's own fields
	// then sum them up: RunID lists every shard's run_id, comma-separated;
	// Err and ConfigErr are the first shard's failure; RTT and ClockOffset
	// those of the shard farthest off; the settings those of a shard that
	// can evict or lose writes, if any.
	Shards []NodeReport
}

// evicts reports whether the node may evict lock keys under memory
// pressure: a maxmemory limit with any policy but noeviction (every lock key
// has a TTL, so volatile-* policies evict them too).
func (r NodeReport) evicts() bool {
	return r.Maxmemory > 0 && r.MaxmemoryPolicy != "" && r.MaxmemoryPolicy != "noeviction"
}

// survivesRestart reports whether the node keeps every acknowledged write
// across a crash (AOF with appendfsync always), so it may rejoin at once.
// Otherwise it must stay down for the largest TTL after a crash.
func (r NodeReport) survivesRestart() bool {
	return r.AppendOnly && r.AppendFsync == "always"
}

// Warnings lists what is wrong with this node's settings for Redlock, each
// with what to change. Clock offsets are compared across nodes by the caller.
func (r NodeReport) Warnings() []string {
	if r.Misconfigured != nil {
		return []string{r.Misconfigured.Error()}
	}
	if r.Shards != nil {
		return shardWarnings(r.Shards)
	}
	if r.Err != nil {
		return nil
	}
	if r.ClusterEnabled {
		return []string{fmt.Sprintf("a Redis Cluster member given as a single server: most keys answer MOVED; write the node as redis-cluster://%s (rediss-cluster:// for TLS)", r.Addr)}
	}
	if r.ConfigErr != nil {
		return []string{fmt.Sprintf("identity or settings unknown (INFO or CONFIG GET refused: %v): allow both for this user to have them checked", r.ConfigErr)}
	}
	var w []string
	if r.evicts() {
		w = append(w, fmt.Sprintf("maxmemory-policy %s can evict lock keys: set maxmemory-policy noeviction (or maxmemory 0)", r.MaxmemoryPolicy))
	}
	if !r.survivesRestart() {
		w = append(w, "writes are lost on a crash (appendonly "+yesNo(r.AppendOnly)+", appendfsync "+r.AppendFsync+
			"): after a crash keep the node down for at least the largest lock TTL, or set appendonly yes and appendfsync always")
	}
	return w
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Problems lists what must be fixed on this node, each with what to change:
// the subset of Warnings that breaks locking or its guarantee (a
// misconfiguration, a policy that evicts lock keys). Persistence without
// fsync on every write is not among them: it is safe under the
// delayed-restart rule that Warnings states.
func (r NodeReport) Problems() []string {
	if r.Misconfigured != nil {
		return []string{r.Misconfigured.Error()}
	}
	var p []string
	for _, w := range r.Warnings() {
		if r.evicts() && strings.HasPrefix(w, "maxmemory-policy") {
			p = append(p, w)
		}
	}
	return p
}

// Check asks every node, at once and each within a few node timeouts, for
// its identity, clock and settings, and runs the release script on a key
// nobody holds (it changes nothing) to find a node that would refuse every
// lock (NodeReport.Misconfigured); the operator's tools compare the identities. A node
// that fails has Err set; the error is reserved for bad input, a closed
// client and the end of ctx. On a client just made it first waits, at most
// 4 node timeouts, for the nodes to be dialed and their scripts loaded.
func (a Admin) Check(ctx context.Context) ([]NodeReport, error) { return a.c.check(ctx) }

func (c *Client) check(ctx context.Context) ([]NodeReport, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	// The script probe goes after the workers' own script loads: a probe
	// ahead of them met NOSCRIPT on a cluster master and fell back to EVAL.
	c.awaitWarm(ctx)
	out := make([]NodeReport, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { out[i] = checkNode(ctx, n, 4*c.cfg.nodeTimeout, c.cfg.prefix) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	markSameServer(out)
	return out, nil
}

// checkNode runs the calls of Check on one node (TIME, INFO, CONFIG GET and
// a release of a key nobody holds); it uses the node's client directly,
// beside the batching worker, since nothing here is urgent. A cluster node
// is checked on every master.
func checkNode(ctx context.Context, n *node, bound time.Duration, prefix string) NodeReport {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if cc, ok := n.client.(*redis.ClusterClient); ok {
		r := checkCluster(ctx, n, cc)
		if r.Misconfigured == nil && r.Err == nil {
			r.Misconfigured = misconfigured(probeScript(ctx, cc, prefix), true)
		}
		return r
	}
	_, single := n.client.(*redis.Client)
	r := checkServer(ctx, n.idx, n.addr, n.client)
	if r.Err == nil && r.Misconfigured == nil {
		r.Misconfigured = misconfigured(probeScript(ctx, n.client, prefix), true)
	}
	if single && r.ClusterEnabled && r.Misconfigured == nil {
		r.Misconfigured = fmt.Errorf("%w: a Redis Cluster member (cluster_enabled:1) given as a single server: "+
			"it refuses the keys of other shards' slots (MOVED); write the node as redis-cluster://%s, "+
			"or give the whole cluster as a *redis.ClusterClient to redlock.New", errMisconfigured, n.addr)
	}
	return r
}

// checkServer runs the clock, identity and settings calls of Check on one
// server (a node, or one master of a cluster node).
func checkServer(ctx context.Context, idx int, addr string, cl redis.UniversalClient) NodeReport {
	r := NodeReport{Node: idx, Addr: addr}
	if r.Err = measureClock(ctx, cl, &r); r.Err != nil {
		r.Misconfigured = misconfigured(r.Err, false)
		return r
	}
	info, err := cl.Info(ctx).Result() // default sections: server and cluster among them
	if err != nil {
		r.ConfigErr = err
		return r
	}
	r.RunID, r.Version = infoField(info, "run_id"), infoField(info, "redis_version")
	r.ClusterEnabled = infoField(info, "cluster_enabled") == "1"
	r.ConfigErr = readSettings(ctx, cl, &r)
	return r
}

// measureClock reads the node's TIME and compares it with the local wall
// clock at the midpoint of the round trip.
func measureClock(ctx context.Context, cl redis.UniversalClient, r *NodeReport) error {
	start := time.Now()
	t, err := cl.Time(ctx).Result()
	if err != nil {
		return err
	}
	end := time.Now()
	r.RTT = end.Sub(start)
	mid := start.Add(r.RTT / 2)
	r.ClockOffset = t.Sub(mid.Round(0))
	return nil
}

// readSettings fills the settings Redlock depends on.
func readSettings(ctx context.Context, cl redis.UniversalClient, r *NodeReport) error {
	kv, err := cl.ConfigGet(ctx, "*").Result()
	if err != nil {
		return err
	}
	r.MaxmemoryPolicy = kv["maxmemory-policy"]
	r.Maxmemory, _ = strconv.ParseInt(kv["maxmemory"], 10, 64)
	r.AppendOnly = kv["appendonly"] == "yes"
	r.AppendFsync = kv["appendfsync"]
	return nil
}

// infoField returns one field of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
