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
		aof := "no"
		if r.AppendOnly {
			aof = "yes"
		}
		w = append(w, "writes are lost on a crash (appendonly "+aof+", appendfsync "+r.AppendFsync+
			"): after a crash keep the node down for at least the largest lock TTL, or set appendonly yes and appendfsync always")
	}
	return w
}

// Problems lists what must be fixed on this node, each with what to change:
// the subset of Warnings that breaks locking or its guarantee (a
// misconfiguration, a policy that evicts lock keys). Persistence without
// fsync on every write is not among them: it is safe under the
// delayed-restart rule that Warnings states.
func (r NodeReport) Problems() []string {
	w := r.Warnings() // the misconfiguration, or the eviction warning, comes first
	if r.Misconfigured != nil || len(w) > 0 && strings.HasPrefix(w[0], "maxmemory-policy") {
		return w[:1]
	}
	return nil
}

// Check asks every node, at once and each within a few node timeouts, for
// its identity, clock and settings, and runs the release script on a key
// nobody holds (it changes nothing) to find a node that would refuse every
// lock (NodeReport.Misconfigured); the operator's tools compare the identities. A node
// that fails has Err set; the error is reserved for bad input, a closed
// client and the end of ctx. On a client just made it first waits, at most
// 4 node timeouts, for the nodes to be dialed and their scripts loaded.
func (a Admin) Check(ctx context.Context) ([]NodeReport, error) {
	c := a.c
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

// checkServer runs the clock, identity and settings calls of Check on one
// server (a node, or one master of a cluster node). The clock offset is
// taken at the midpoint of the TIME round trip.
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
// that retrying will not fix (NodeReport.Misconfigured): NewFromURLs refuses
// such a node at once (ErrInvalid) rather than counting it as down.
var errMisconfigured = fmt.Errorf("%w: lock node misconfigured", ErrInvalid)

// permanentErrors are the error replies that no retry cures, by prefix,
// with what to change; script says whether the error came from the lock's
// own commands (unknown commands and ACL denials count only there: a node
// may refuse TIME and still hold locks).
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

// misconfigured classifies a node's error reply: an error matching
// ErrInvalid that says what to change, or nil when err is nil or may
// pass (a timeout, a refused connection, a node loading its data).
func misconfigured(err error, script bool) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, p := range permanentErrors {
		if strings.HasPrefix(msg, p.prefix) && (script || !p.script) {
			return fmt.Errorf("%w: %s (%v)", errMisconfigured, p.fix, err)
		}
	}
	return nil
}

// probeScript runs the release script on a key nobody holds (it changes
// nothing): an ACL or a renamed command that would refuse every lock shows
// here rather than as a node that never grants one.
func probeScript(ctx context.Context, cl redis.UniversalClient, prefix string) error {
	key := []string{prefix + "{asynqlock:check}"}
	err := cl.EvalSha(ctx, releaseScript.SHA, key, "no token is this", "").Err()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		err = cl.Eval(ctx, releaseScript.Src, key, "no token is this", "").Err()
	}
	return err
}

// markSameServer sets the SameServer of every report whose node reaches the
// server of another: the two share a run ID.
func markSameServer(reports []NodeReport) {
	ids := make([][]string, len(reports))
	for i, r := range reports {
		ids[i] = runIDs(r)
	}
	for i := range reports {
		for j := range reports {
			if j != i && slices.ContainsFunc(ids[j], func(id string) bool { return slices.Contains(ids[i], id) }) {
				reports[i].SameServer = append(reports[i].SameServer, j)
			}
		}
	}
}

// runIDs are the server identities of a node that answered Check: its
// run_id, or each shard's of a Redis Cluster, so that two lock nodes
// sharing any one server are caught.
func runIDs(r NodeReport) []string {
	shards := r.Shards
	if shards == nil {
		shards = []NodeReport{r}
	}
	var ids []string
	for _, s := range shards {
		if s.Err == nil && s.RunID != "" {
			ids = append(ids, s.RunID)
		}
	}
	return ids
}

// firstContact checks the nodes of a new client as NewFromURLs does: every
// node that answers within a few node timeouts is asked who it is and
// whether it accepts the lock's commands; names are the nodes as errors may
// show them (URLs with passwords masked). It returns an error matching
// ErrInvalid for what no retry cures (one server reached twice among them);
// a node that does not answer is left to the lock's own calls (it may be
// down for now).
func (c *Client) firstContact(names []string) error {
	reports, err := c.Admin().Check(context.Background())
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range reports {
		err := r.Misconfigured
		if err == nil && r.Err == nil {
			err = c.passwordUnused(r.Node)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d (%s): %w", r.Node, names[r.Node], err))
		}
	}
	for _, r := range reports {
		if len(r.SameServer) > 0 && r.SameServer[0] < r.Node {
			first := r.SameServer[0]
			errs = append(errs, fmt.Errorf("node %d (%s): %w: it reaches the server of node %d (%s), same run_id: "+
				"one server casts one vote; give each lock node its own redis-server", r.Node, names[r.Node], errMisconfigured, first, names[first]))
		}
	}
	return errors.Join(errs...) // each matches ErrInvalid
}

// passwordUnused tells a password given for node i that the node does not
// have (redisurl.UnusedPassword), as misconfigured does the other errors
// no retry cures.
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
