package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// NodeReport is what Admin.Check learned of one lock node: who it is, how
// far its clock is from ours, and the settings Redlock's guarantee depends
// on. Admin.Ping fills Node, Addr and Err only.
type NodeReport struct {
	Node    int    // index in the node list
	Addr    string // the node's address, never its credentials
	RunID   string // the server's identity (INFO run_id); equal run IDs mean one server
	Version string // redis_version
	// RTT is the round trip of the TIME call that measured ClockOffset: the
	// node's wall clock minus this process's at its midpoint, ±RTT/2.
	RTT, ClockOffset time.Duration
	// Settings, from CONFIG GET; unknown ("" and 0) when ConfigErr is set.
	MaxmemoryPolicy string
	Maxmemory       int64 // bytes; 0 means no limit, so no eviction
	AppendOnly      bool
	AppendFsync     string
	// Err is the node's failure to answer TIME (PING for Admin.Ping);
	// nothing else is known then.
	Err error
	// ConfigErr is the node's refusal of INFO or CONFIG GET (an ACL, a
	// renamed command, an embedded server): its clock is known, its identity
	// (RunID "") or settings are not.
	ConfigErr error
	// ClusterEnabled is INFO's cluster_enabled: on a node given as a single
	// server it means a cluster member that answers MOVED for most keys.
	ClusterEnabled bool
	// Misconfigured, matching ErrInvalid, says what to change on a node that
	// refuses this client for a reason no retry cures: a wrong or missing
	// password, an ACL denying the lock's commands or keys, an unknown
	// command, or a Redis Cluster member given as a single server.
	Misconfigured error
	// SameServer lists the other nodes (indexes, ascending) that reach this
	// node's server or one of its shards (equal run IDs): one server casting
	// several votes undoes Redlock's fault tolerance. Nil while independent.
	SameServer []int
	// Shards are the reports of each master of a Redis Cluster node, by
	// address (nil for a single server), which the node's own fields sum up:
	// RunID lists every shard's run_id, comma-separated; Err and ConfigErr
	// are the first shard's failure; RTT and ClockOffset the shard farthest
	// off's; the settings those of a shard that can evict or lose writes.
	Shards []NodeReport
	// Warnings lists, for Check, what is wrong with the node's settings for
	// Redlock, each with what to change (clock offsets are compared across
	// nodes by the caller). Problems are those of them that break locking
	// or its guarantee (a misconfiguration, a policy that evicts lock keys),
	// each shard's named; persistence without fsync on every write is safe
	// under the delayed-restart rule its warning states, so it is none.
	Warnings, Problems []string
}

// evicts reports whether the node may evict lock keys: a maxmemory limit
// with any policy but noeviction (lock keys have TTLs, so volatile-* too).
func (r NodeReport) evicts() bool {
	return r.Maxmemory > 0 && r.MaxmemoryPolicy != "" && r.MaxmemoryPolicy != "noeviction"
}

// survivesRestart reports whether the node keeps every acknowledged write
// across a crash (AOF with appendfsync always), so it may rejoin at once.
func (r NodeReport) survivesRestart() bool {
	return r.AppendOnly && r.AppendFsync == "always"
}

// note fills the Warnings and Problems of r and of its shards.
func (r *NodeReport) note() {
	r.Warnings, r.Problems = r.notes(false), r.notes(true)
	for i := range r.Shards {
		s := &r.Shards[i]
		s.ClusterEnabled = false // a shard is meant to be one
		s.Warnings, s.Problems = s.notes(false), s.notes(true)
	}
}

// notes are r's Warnings, or only its Problems.
func (r NodeReport) notes(problems bool) []string {
	if r.Misconfigured != nil {
		return []string{r.Misconfigured.Error()}
	}
	var w []string
	for _, s := range r.Shards {
		if s.Err != nil {
			if !problems {
				w = append(w, fmt.Sprintf("shard %s unreachable: %v", s.Addr, s.Err))
			}
			continue
		}
		s.ClusterEnabled = false // a shard is meant to be one
		for _, m := range s.notes(problems) {
			w = append(w, "shard "+s.Addr+": "+m)
		}
	}
	switch {
	case r.Shards != nil || r.Err != nil:
		return w
	case r.ClusterEnabled && !problems:
		return []string{"a Redis Cluster member given as a single server: most keys answer MOVED; " +
			"write the node as redis-cluster://" + r.Addr + " (rediss-cluster:// for TLS)"}
	case r.ConfigErr != nil && problems:
		return nil
	case r.ConfigErr != nil:
		return []string{fmt.Sprintf("identity or settings unknown (INFO or CONFIG GET refused: %v): "+
			"allow both for this user to have them checked", r.ConfigErr)}
	}
	if r.evicts() {
		w = append(w, "maxmemory-policy "+r.MaxmemoryPolicy+
			" can evict lock keys: set maxmemory-policy noeviction (or maxmemory 0)")
	}
	if !r.survivesRestart() && !problems {
		aof := "no"
		if r.AppendOnly {
			aof = "yes"
		}
		w = append(w, "writes are lost on a crash (appendonly "+aof+", appendfsync "+r.AppendFsync+
			"): after a crash keep the node down for at least the largest lock TTL, or set appendonly yes and appendfsync always")
	}
	return w
}

// Check asks every node at once, each within 4 node timeouts, for its
// identity, clock and settings, runs the release script on a key nobody
// holds to find a node that refuses every lock (Misconfigured), and marks
// nodes that share a server (SameServer). A node that fails has Err set; the
// error is for bad input, a closed client and the end of ctx. A client
// just made first waits for its nodes' dial and script loads.
func (a Admin) Check(ctx context.Context) ([]NodeReport, error) {
	c := a.c
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	c.awaitWarm(ctx) // a probe ahead of the loads met NOSCRIPT on a cluster master
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
	for i := range out {
		out[i].note()
	}
	return out, nil
}

// checkNode runs Check's calls on one node, on every master of a cluster
// node, with the node's client beside its worker: nothing here is urgent.
func checkNode(ctx context.Context, n *transport.Node, bound time.Duration, prefix string) NodeReport {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var r NodeReport
	if cc, ok := n.Client.(*redis.ClusterClient); ok {
		r = checkCluster(ctx, n, cc)
	} else {
		r = checkServer(ctx, n.Idx, n.Addr, n.Client)
	}
	if r.Err == nil && r.Misconfigured == nil {
		r.Misconfigured = misconfigured(probeScript(ctx, n.Client, prefix), true)
	}
	if _, single := n.Client.(*redis.Client); single && r.ClusterEnabled && r.Misconfigured == nil {
		r.Misconfigured = fmt.Errorf("%w: a Redis Cluster member (cluster_enabled:1) given as a single server: "+
			"it refuses the keys of other shards' slots (MOVED); write the node as redis-cluster://%s, "+
			"or give the whole cluster as a *redis.ClusterClient to redlock.New", errMisconfigured, n.Addr)
	}
	return r
}

// checkServer runs Check's clock, identity and settings calls on one
// server: a node, or one master of a cluster node.
func checkServer(ctx context.Context, idx int, addr string, cl redis.UniversalClient) NodeReport {
	r := NodeReport{Node: idx, Addr: addr}
	start := time.Now()
	t, err := cl.Time(ctx).Result()
	if err != nil {
		r.Err, r.Misconfigured = err, misconfigured(err, false)
		return r
	}
	r.RTT = time.Since(start)
	r.ClockOffset = t.Sub(start.Add(r.RTT / 2).Round(0))
	info, err := cl.Info(ctx).Result() // default sections: server and cluster among them
	if err != nil {
		r.ConfigErr = err
		return r
	}
	r.RunID, r.Version = infoField(info, "run_id"), infoField(info, "redis_version")
	r.ClusterEnabled = infoField(info, "cluster_enabled") == "1"
	kv, err := cl.ConfigGet(ctx, "*").Result()
	if err != nil {
		r.ConfigErr = err
		return r
	}
	r.MaxmemoryPolicy = kv["maxmemory-policy"]
	r.Maxmemory, _ = strconv.ParseInt(kv["maxmemory"], 10, 64)
	r.AppendOnly = kv["appendonly"] == "yes"
	r.AppendFsync = kv["appendfsync"]
	return r
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

// errMisconfigured marks a lock node that refuses this client for a reason
// no retry cures (NodeReport.Misconfigured): NewFromURLs refuses it.
var errMisconfigured = fmt.Errorf("%w: lock node misconfigured", ErrInvalid)

// permanentErrors are the error replies no retry cures, by prefix, with
// what to change; script ones count only from the lock's own commands (a
// node may refuse TIME and still hold locks).
var permanentErrors = []struct {
	prefix, fix string
	script      bool
}{
	{"WRONGPASS", "wrong user name or password: correct them in the node's URL", false},
	{"NOAUTH", "the node needs a password and none is given: add user:password@ to the node's URL", false},
	{"ERR AUTH", "a password is given but the node has none configured: remove it from the node's URL", false},
	{"ERR Client sent AUTH", "a password is given but the node has none configured: remove it from the node's URL", false},
	{"NOPERM", "the ACL user may not run the lock's commands on its keys: grant +@scripting +set +get +del +publish and the key prefix (~prefix*) and channels (&prefix*)", true},
	{"ERR unknown command", "the node does not know a command the lock needs (renamed or disabled?): EVALSHA, EVAL, SET, GET, DEL and PUBLISH must be available", true},
}

// misconfigured is err's permanentErrors entry as an error matching
// ErrInvalid, or nil for an error that may pass (a timeout, a refused
// connection, a node loading its data).
func misconfigured(err error, script bool) error {
	for _, p := range permanentErrors {
		if err != nil && strings.HasPrefix(err.Error(), p.prefix) && (script || !p.script) {
			return fmt.Errorf("%w: %s (%v)", errMisconfigured, p.fix, err)
		}
	}
	return nil
}

// probeScript runs the release script on a key nobody holds (it changes
// nothing): an ACL or a renamed command that would refuse every lock shows
// here, not as a node that never grants one.
func probeScript(ctx context.Context, cl redis.UniversalClient, prefix string) error {
	key := []string{prefix + "{asynqlock:check}"}
	err := cl.EvalSha(ctx, releaseScript.SHA, key, "no token is this", "").Err()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		err = cl.Eval(ctx, releaseScript.Src, key, "no token is this", "").Err()
	}
	return err
}

// markSameServer sets the SameServer of every report whose node shares a
// run ID with another: its own, or any shard's of a Redis Cluster.
func markSameServer(reports []NodeReport) {
	ids := make([][]string, len(reports))
	for i, r := range reports {
		shards := r.Shards
		if shards == nil {
			shards = []NodeReport{r}
		}
		for _, s := range shards {
			if s.Err == nil && s.RunID != "" {
				ids[i] = append(ids[i], s.RunID)
			}
		}
	}
	for i := range reports {
		for j := range reports {
			if j != i && slices.ContainsFunc(ids[j], func(id string) bool { return slices.Contains(ids[i], id) }) {
				reports[i].SameServer = append(reports[i].SameServer, j)
			}
		}
	}
}

// firstContact checks a new client's nodes for NewFromURLs: an error
// matching ErrInvalid for what no retry cures (one server reached twice
// among them), naming nodes by names (URLs with passwords masked). A node
// that does not answer is left to the lock's own calls: it may be down for
// now.
func (c *Client) firstContact(names []string) error {
	reports, err := c.Admin().Check(context.Background())
	if err != nil {
		return err
	}
	var errs, same []error // every node's misconfiguration first, then the servers reached twice
	for _, r := range reports {
		err := r.Misconfigured
		if err == nil && r.Err == nil {
			err = c.passwordUnused(r.Node)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d (%s): %w", r.Node, names[r.Node], err))
		}
		if len(r.SameServer) > 0 && r.SameServer[0] < r.Node {
			first := r.SameServer[0]
			same = append(same, fmt.Errorf("node %d (%s): %w: it reaches the server of node %d (%s), same run_id: "+
				"one server casts one vote; give each lock node its own redis-server", r.Node, names[r.Node], errMisconfigured, first, names[first]))
		}
	}
	return errors.Join(append(errs, same...)...) // each matches ErrInvalid
}

// passwordUnused is misconfigured's error for a password given for node i
// that the node does not have (redisurl.UnusedPassword).
func (c *Client) passwordUnused(i int) error {
	var user, pw string
	switch cl := c.nodes[i].Client.(type) {
	case *redis.Client:
		user, pw = cl.Options().Username, cl.Options().Password
	case *redis.ClusterClient:
		user, pw = cl.Options().Username, cl.Options().Password
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout(c.cfg.nodeTimeout))
	defer cancel()
	return misconfigured(redisurl.UnusedPassword(ctx, c.nodes[i].Client, user, pw), false)
}
