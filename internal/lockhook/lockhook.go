// Package lockhook is how package redlock hands the module's own code what
// is not part of its public API: operator calls (through internal/lockadmin)
// and tuning knobs for tests and benchmarks. Package redlock sets every
// variable in its init; nothing else may. Each function taking c any expects
// a *redlock.Client; those returning any return a redlock.Option.
package lockhook

import (
	"context"
	"time"
)

// NodeStatus is one node's answer to a ping.
type NodeStatus struct {
	Node int    // index of the node in the client's list
	Addr string // the node's address, never its credentials
	Err  error  // nil when the node answered; else the cause (a *redlock.NodeError)
}

// Set by package redlock.
var (
	// Nodes returns the number of nodes.
	Nodes func(c any) int
	// PingNodes pings every node at once and waits for every answer, at most
	// the node timeout.
	PingNodes func(c any, ctx context.Context) ([]NodeStatus, error)
	// Scan returns the resources whose lock key, on any node, starts with
	// resourcePrefix under the client's key prefix (unsorted, possibly
	// repeated), and each node's scan failure (nil where it was scanned).
	Scan func(c any, ctx context.Context, resourcePrefix string) ([]string, []error, error)
	// ForceRelease deletes resource's lock key where it still holds token
	// and announces the release; it returns on how many nodes it did.
	ForceRelease func(c any, ctx context.Context, resource, token string) (int, error)
	// LocalQueue turns the in-process FIFO queue of waiters on or off.
	LocalQueue func(on bool) any
	// BatchWindow sets the batch window of the nodes' workers.
	BatchWindow func(d time.Duration) any
	// InspectOnly makes NewFromURLs keep nodes it would refuse (one server
	// twice, a misconfigured node), for a tool that reports them.
	InspectOnly func() any
)

type inspectWaitKey struct{}

// WithInspectWait returns a context under which Client.Inspect waits at
// least d for each node's answer (instead of the node timeout alone): an
// operator's read is not latency-bound, and a loaded node must not make a
// held lock look free.
func WithInspectWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, inspectWaitKey{}, d)
}

// InspectWait is the wait set by WithInspectWait, 0 if none.
func InspectWait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(inspectWaitKey{}).(time.Duration)
	return d
}
