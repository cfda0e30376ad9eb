package lockadmin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// ErrSameServer means two node URLs reach one Redis server: that server
// casts two votes, and Redlock's fault tolerance is gone.
var ErrSameServer = errors.New("redlock: two lock nodes are one server")

// ClockSkew is the clock distance past which the module's tools warn
// (ClockWarnings' limit).
const ClockSkew = time.Second

// SameServerError names the nodes that are one server. It matches
// ErrSameServer.
type SameServerError struct {
	// Groups lists, per server reached more than once, the nodes reaching
	// it (indexes, ascending).
	Groups [][]int
	// Addrs names the nodes, by index: addresses, or URLs with their
	// passwords masked (two databases of one server share an address).
	Addrs []string
}

// Error names every group by index and address.
func (e *SameServerError) Error() string {
	parts := make([]string, len(e.Groups))
	for i, g := range e.Groups {
		names := make([]string, len(g))
		for j, n := range g {
			names[j] = fmt.Sprintf("node %d (%s)", n, e.Addrs[n])
		}
		parts[i] = strings.Join(names, " and ")
	}
	return ErrSameServer.Error() + ": " + strings.Join(parts, "; ") +
		" have the same run_id; give each lock node its own redis-server"
}

// Is makes errors.Is(err, ErrSameServer) true.
func (e *SameServerError) Is(target error) bool { return target == ErrSameServer }

// SameServer returns a *SameServerError naming the nodes of the reports of
// Check that reach one server (NodeReport.SameServer), else nil.
func SameServer(reports []redlock.NodeReport) error {
	e := &SameServerError{Addrs: make([]string, len(reports))}
	for _, r := range reports {
		if r.Node < 0 || r.Node >= len(reports) {
			continue
		}
		e.Addrs[r.Node] = r.Addr
		g := slices.Sorted(slices.Values(append([]int{r.Node}, r.SameServer...)))
		if len(g) > 1 && !slices.ContainsFunc(e.Groups, func(h []int) bool { return slices.Equal(g, h) }) {
			e.Groups = append(e.Groups, g)
		}
	}
	if len(e.Groups) == 0 {
		return nil
	}
	return e
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
