// Package sameserver groups lock nodes that are one Redis server by their
// servers' identities (INFO run_id), for redlock's first contact and the
// NodeReport.SameServer of its checks.
package sameserver

import "slices"

// Find returns, per server reached by more than one node, the nodes that
// reach it (indexes, ascending; groups in the order their first identity
// appears), or nil when every node has a server of its own. ids[i] are node
// i's server identities: one run_id, or each shard's of a Redis Cluster, so
// that two nodes sharing any one server are caught. Two clusters sharing
// several servers make one group.
func Find(ids [][]string) [][]int {
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
	var groups [][]int
	for _, id := range order {
		g := byID[id]
		slices.Sort(g)
		if len(g) > 1 && !slices.ContainsFunc(groups, func(h []int) bool { return slices.Equal(g, h) }) {
			groups = append(groups, g)
		}
	}
	return groups
}
