// Package sameserver tells lock nodes that are one Redis server apart from
// independent ones by their servers' identities (INFO run_id), for redlock's
// first contact and the operator's tools.
package sameserver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSameServer means two nodes reach one Redis server (equal run IDs):
// that server casts two votes, and Redlock's fault tolerance is gone.
var ErrSameServer = errors.New("redlock: two lock nodes are one server")

// Error names the nodes that are one server. It matches ErrSameServer.
type Error struct {
	// Groups lists, per server reached more than once, the nodes reaching
	// it (indexes, ascending).
	Groups [][]int
	// Addrs names the nodes, by index: addresses, or URLs with their
	// passwords masked (two databases of one server share an address).
	Addrs []string
}

// Error names every group by index and address.
func (e *Error) Error() string {
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
func (e *Error) Is(target error) bool { return target == ErrSameServer }

// Find returns an *Error when two or more nodes share a server, else nil:
// ids[i] are node i's server identities (one run_id, or each shard's of a
// Redis Cluster, so that two nodes sharing any one server are caught),
// addrs[i] its name. Spelling does not matter: localhost and 127.0.0.1, or
// two databases of one server, are caught.
func Find(ids [][]string, addrs []string) error {
	byID := map[string][]int{}
	var order []string
	for node, nodeIDs := range ids {
		for _, id := range nodeIDs {
			if _, seen := byID[id]; !seen {
				order = append(order, id)
			}
			if !slices.Contains(byID[id], node) {
				byID[id] = append(byID[id], node)
			}
		}
	}
	e := &Error{Addrs: addrs}
	for _, id := range order {
		g := byID[id]
		slices.Sort(g)
		// Two clusters sharing servers share several run IDs: one group.
		if len(g) > 1 && !slices.ContainsFunc(e.Groups, func(h []int) bool { return slices.Equal(g, h) }) {
			e.Groups = append(e.Groups, g)
		}
	}
	if len(e.Groups) == 0 {
		return nil
	}
	return e
}
