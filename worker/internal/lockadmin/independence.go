package lockadmin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/sameserver"
	"github.com/asynqlock/asynqlock/redlock"
)

// ErrSameServer means two node URLs reach one Redis server.
var ErrSameServer = sameserver.ErrSameServer

// ClockSkew is the clock distance past which the module's tools warn
// (ClockWarnings' limit).
const ClockSkew = time.Second

// SameServerError names the nodes that are one server.
type SameServerError = sameserver.Error

// SameServer compares the run IDs of the nodes that answered Check and
// returns a *SameServerError when two or more reach one server (equal run
// IDs, or a shared shard's of a Redis Cluster), else nil.
func SameServer(reports []redlock.NodeReport) error {
	ids, addrs := make([][]string, len(reports)), make([]string, len(reports))
	for _, r := range reports {
		i := r.Node
		if i < 0 || i >= len(reports) {
			continue
		}
		addrs[i] = r.Addr
		if r.Shards == nil && r.Err == nil && r.RunID != "" {
			ids[i] = []string{r.RunID}
		}
		for _, s := range r.Shards {
			if s.Err == nil && s.RunID != "" {
				ids[i] = append(ids[i], s.RunID)
			}
		}
	}
	return sameserver.Find(ids, addrs)
}

// ClockWarnings compares the clocks Check measured: a node whose clock is
// more than limit from the median of the answering nodes is named (its TTLs
// still run at the right rate, but fencing counters restarted from its clock
// and anything reading TIME go wrong), and so is this process when its own
// clock is more than limit from that median. Each warning says what to do.
// The measurement error of each offset (RTT/2) is allowed for.
func ClockWarnings(reports []redlock.NodeReport, limit time.Duration) []string {
	var offs []time.Duration
	for _, r := range reports {
		if r.Err == nil {
			offs = append(offs, r.ClockOffset)
		}
	}
	if len(offs) == 0 {
		return nil
	}
	slices.Sort(offs)
	median := offs[len(offs)/2]
	var w []string
	for _, r := range reports {
		if r.Err != nil {
			continue
		}
		if d := (r.ClockOffset - median).Abs(); d > limit+r.RTT/2 {
			w = append(w, fmt.Sprintf("node %d (%s): clock %v away from the other nodes: synchronise its clock (NTP/chrony)",
				r.Node, r.Addr, d.Round(time.Millisecond)))
		}
	}
	if median.Abs() > limit {
		w = append(w, fmt.Sprintf("this host's clock is %v away from the lock nodes': synchronise it (NTP/chrony); cron replicas compare their clocks with the nodes",
			median.Abs().Round(time.Millisecond)))
	}
	return w
}

// ErrClusterAsSingle means a node given as a single server (redis://) is a
// Redis Cluster member: it answers MOVED for the keys of other shards, so
// most resources could never reach a quorum.
var ErrClusterAsSingle = errors.New("redlock: a Redis Cluster member given as a single server")

// ClusterAsSingle returns an error naming every node given as a single server
// that reported cluster_enabled:1, with the form to write, else nil.
func ClusterAsSingle(reports []redlock.NodeReport) error {
	var parts []string
	for _, r := range reports {
		if r.Shards == nil && r.Err == nil && r.ClusterEnabled {
			parts = append(parts, fmt.Sprintf("node %d (%s): write redis-cluster://%s (rediss-cluster:// for TLS)", r.Node, r.Addr, r.Addr))
		}
	}
	if parts == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrClusterAsSingle, strings.Join(parts, "; "))
}
