package lockadmin

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/asynqlock/asynqlock/redlock"
)

// ListLimit is the number of resources List returns at most when its limit
// is not positive.
const ListLimit = 1000

// HeldLock is a resource List found with a lock key on some node.
type HeldLock struct {
	Resource string
	Nodes    []redlock.NodeState // one per node, as Inspect returns them
}

// Listing is what List found.
type Listing struct {
	Locks []HeldLock // sorted by resource
	// ScanErrs has one entry per node: nil where the node was scanned, its
	// failure otherwise (locks held only there are then missing).
	ScanErrs []error
	// Truncated reports that more resources matched than the limit.
	Truncated bool
}

// List finds the resources locked on any node whose name starts with
// resourcePrefix ("" for all) under the client's key prefix, at most limit of
// them (ListLimit when limit <= 0), and inspects each, waiting at least
// 500ms for each node. It scans every node's keyspace (SCAN, never KEYS), so
// keep it off hot paths. Nodes that fail are reported in ScanErrs and in each
// lock's NodeState (a resource a node failed to describe stays listed even if
// no node that answered holds it); the error is reserved for bad input and
// ctx's end.
func List(ctx context.Context, c *redlock.Client, resourcePrefix string, limit int) (*Listing, error) {
	if limit <= 0 {
		limit = ListLimit
	}
	found, scanErrs, err := c.Admin().Scan(ctx, resourcePrefix)
	if err != nil {
		return nil, err
	}
	slices.Sort(found)
	names := slices.Compact(found)
	out := &Listing{ScanErrs: scanErrs}
	if len(names) > limit {
		names, out.Truncated = names[:limit], true
	}
	locks, err := inspectAll(ctx, c, names)
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		// Gone since the scan only if every node answered that it is free.
		if slices.ContainsFunc(l.Nodes, func(s redlock.NodeState) bool { return s.Token != "" || s.Err != nil }) {
			out.Locks = append(out.Locks, l)
		}
	}
	return out, nil
}

// inspectAll inspects resources a few at a time: the nodes' workers batch
// the concurrent calls.
func inspectAll(ctx context.Context, c *redlock.Client, names []string) ([]HeldLock, error) {
	locks := make([]HeldLock, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, r := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, err := c.Inspect(ctx, r)
			locks[i], errs[i] = HeldLock{Resource: r, Nodes: st}, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return locks, nil
}
