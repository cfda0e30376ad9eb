package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

func listFlags(fs *flag.FlagSet) any {
	return fs.Int("limit", lockadmin.ListLimit, "list at most this many resources")
}

// runList prints the held locks under a resource prefix.
func runList(ctx context.Context, a *app, flags any, args []string) error {
	prefix := ""
	if len(args) == 1 {
		prefix = args[0]
	}
	limit := *flags.(*int)
	if limit <= 0 {
		return fmt.Errorf("%w: --limit must be positive, got %d", errUsage, limit)
	}
	l, err := lockadmin.List(ctx, a.locks, prefix, limit)
	if err != nil {
		return err
	}
	var scanErrs []string
	for _, e := range l.ScanErrs {
		if e != nil {
			scanErrs = append(scanErrs, e.Error())
			a.log.Warn("lock node not scanned: locks held only there are missing", "err", e)
		}
	}
	if a.json {
		out := struct {
			Locks      []lockJSON `json:"locks"`
			ScanErrors []string   `json:"scan_errors,omitempty"`
			Truncated  bool       `json:"truncated"`
		}{Locks: []lockJSON{}, ScanErrors: scanErrs, Truncated: l.Truncated}
		for _, h := range l.Locks {
			out.Locks = append(out.Locks, toLockJSON(h.Resource, h.Nodes))
		}
		return writeJSON(a.out, out)
	}
	if len(l.Locks) == 0 {
		fmt.Fprintf(a.out, "no locks held under key prefix %q with resource prefix %q\n", a.prefix, prefix)
	} else {
		t := newTable(a.out, "RESOURCE", "HOLDER", "NODES", "TTL", "FENCE")
		for _, h := range l.Locks {
			claims := lockadmin.Claims(h.Nodes)
			for _, g := range claims {
				t.row(resourceText(h.Resource, g), claimHolder(g), nodeList(g.Nodes, lockadmin.NodeCount(h.Nodes)), ttlText(g.TTL), fenceText(g.Fence))
			}
			if len(claims) == 0 { // found by the scan, then no node that answered held it
				t.row(h.Resource, "? (nodes did not answer)", fmt.Sprintf("%d/%d failed", failed(h.Nodes), lockadmin.NodeCount(h.Nodes)), "-", "-")
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if l.Truncated {
		fmt.Fprintf(a.err, "asynqlock list: more than %d resources; showing the first %d (use --limit or a prefix)\n", limit, limit)
	}
	if len(scanErrs) > 0 {
		return fmt.Errorf("%d of %d nodes could not be scanned", len(scanErrs), len(a.names))
	}
	return nil
}

// runShow prints one resource's state on every node.
func runShow(ctx context.Context, a *app, _ any, args []string) error {
	states, err := a.locks.Inspect(ctx, args[0])
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(a.out, toLockJSON(args[0], states))
	}
	t := newTable(a.out, "NODE", "ADDR", "HOLDER", "TOKEN", "TTL", "FENCE", "ERROR")
	for _, s := range states {
		holder, tok, errText := "-", "-", ""
		if s.Token != "" {
			holder, tok = holderOf(s.Holder, s.Token), shortToken(s.Token)
		}
		if s.Err != nil {
			holder, errText = "?", s.Err.Error()
		}
		node := fmt.Sprint(s.Node)
		if s.Limit > 1 {
			node += fmt.Sprintf(" (slot %d)", s.Slot)
		}
		t.row(node, s.Addr, holder, tok, ttlText(s.TTL), fenceText(s.Fence), errText)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.out, summary(args[0], a.prefix, states, lockadmin.Quorum(len(a.names))))
	return nil
}

// summary says in one line who holds the resource (each held slot of a
// resource used with a limit).
func summary(resource, prefix string, states []redlock.NodeState, quorum int) string {
	groups := lockadmin.Claims(states)
	if len(groups) == 0 {
		return fmt.Sprintf("%s: not held (key prefix %q)", resource, prefix)
	}
	var held []string
	for _, g := range groups {
		if len(g.Nodes) >= quorum {
			held = append(held, fmt.Sprintf("%s on %s", resourceText("by "+claimHolder(g), g), nodeList(g.Nodes, lockadmin.NodeCount(states))))
		}
	}
	if len(held) > 0 {
		return fmt.Sprintf("%s: held %s, quorum %d", resource, strings.Join(held, "; "), quorum)
	}
	return fmt.Sprintf("%s: keys on %d node(s) but no holder has the quorum of %d (leftovers that expire at their TTL, or an acquisition in progress)",
		resource, len(states)-countFree(states), quorum)
}

// resourceText is text followed by the claim's slot, if any.
func resourceText(text string, g lockadmin.Claim) string {
	if s := g.SlotText(); s != "" {
		return text + " (" + s + ")"
	}
	return text
}

func failed(states []redlock.NodeState) int {
	n := 0
	for _, s := range states {
		if s.Err != nil {
			n++
		}
	}
	return n
}

func countFree(states []redlock.NodeState) int {
	n := 0
	for _, s := range states {
		if s.Token == "" {
			n++
		}
	}
	return n
}
