package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// checkJSON is one node in `check --json` output.
type checkJSON struct {
	Node            int      `json:"node"`
	Addr            string   `json:"addr"`
	Reachable       bool     `json:"reachable"`
	Error           string   `json:"error,omitempty"`
	RunID           string   `json:"run_id,omitempty"`
	Version         string   `json:"version,omitempty"`
	RTTMs           float64  `json:"rtt_ms"`
	ClockOffsetMs   float64  `json:"clock_offset_ms"`
	MaxmemoryPolicy string   `json:"maxmemory_policy,omitempty"`
	Maxmemory       int64    `json:"maxmemory"`
	AppendOnly      bool     `json:"appendonly"`
	AppendFsync     string   `json:"appendfsync,omitempty"`
	Warnings        []string `json:"warnings,omitempty"`
	// Shards are the masters of a node that is a Redis Cluster.
	Shards []checkJSON `json:"shards,omitempty"`
}

// errCheckFailed is a check that found a problem: a node down,
// misconfigured or able to evict lock keys, a clock far off, or two nodes
// that are one server.
var errCheckFailed = errors.New("check failed")

// runCheck reports every node's reachability, identity, settings and clock,
// then the problems across nodes. It fails (exit 1) on every problem found
// (see verdict); persistence without fsync on every write is only a note.
func runCheck(ctx context.Context, a *app, _ any, _ []string) error {
	reports, err := a.locks.Admin().Check(ctx)
	if err != nil {
		return err
	}
	// A cluster member given as a single server fails like a shared server:
	// most keys would answer MOVED.
	same := errors.Join(lockadmin.SameServer(reports), lockadmin.ClusterAsSingle(reports))
	var se *lockadmin.SameServerError
	if errors.As(same, &se) {
		se.Addrs = a.names // the URLs tell two databases of one server apart
	}
	clocks := lockadmin.ClockWarnings(reports, lockadmin.ClockSkew)
	down := 0
	for _, r := range reports {
		if r.Err != nil {
			down++
		}
	}
	if a.json {
		if err := writeCheckJSON(a, reports, same, clocks); err != nil {
			return err
		}
	} else if err := writeCheckTable(a, reports, same, clocks); err != nil {
		return err
	}
	return verdict(reports, same, clocks, down, lockadmin.Quorum(len(a.names)))
}

// verdict is check's error: every node down, pair of nodes that are one
// server, node problem (misconfigured, evicting) and clock far off, or nil.
// Persistence notes are not problems: they state the delayed-restart rule.
func verdict(reports []redlock.NodeReport, same error, clocks []string, down, quorum int) error {
	var found []string
	if down > 0 {
		found = append(found, fmt.Sprintf("%d of %d nodes unreachable (quorum %d)", down, len(reports), quorum))
	}
	if same != nil {
		found = append(found, same.Error())
	}
	for _, r := range reports {
		for _, p := range r.Problems {
			found = append(found, fmt.Sprintf("node %d (%s): %s", r.Node, r.Addr, p))
		}
	}
	found = append(found, clocks...)
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errCheckFailed, strings.Join(found, "; "))
}

func writeCheckJSON(a *app, reports []redlock.NodeReport, same error, clocks []string) error {
	out := struct {
		Nodes      []checkJSON `json:"nodes"`
		Quorum     int         `json:"quorum"`
		SameServer [][]int     `json:"same_server,omitempty"`
		Clock      []string    `json:"clock_warnings,omitempty"`
	}{Quorum: lockadmin.Quorum(len(a.names)), Clock: clocks}
	var se *lockadmin.SameServerError
	if errors.As(same, &se) {
		out.SameServer = se.Groups
	}
	for _, r := range reports {
		n := checkRow(r)
		for _, s := range r.Shards {
			n.Shards = append(n.Shards, checkRow(s))
		}
		out.Nodes = append(out.Nodes, n)
	}
	return writeJSON(a.out, out)
}

// checkRow is one node's, or one shard's, report in JSON.
func checkRow(r redlock.NodeReport) checkJSON {
	n := checkJSON{Node: r.Node, Addr: r.Addr, Reachable: r.Err == nil, RunID: r.RunID, Version: r.Version,
		RTTMs: ms(r.RTT), ClockOffsetMs: ms(r.ClockOffset), MaxmemoryPolicy: r.MaxmemoryPolicy, Maxmemory: r.Maxmemory,
		AppendOnly: r.AppendOnly, AppendFsync: r.AppendFsync, Warnings: r.Warnings}
	if r.Err != nil {
		n.Error = r.Err.Error()
	}
	return n
}

// shardsOf are the rows of a node in the table: itself, or each shard of a
// Redis Cluster.
func shardsOf(r redlock.NodeReport) []redlock.NodeReport {
	if r.Shards != nil {
		return r.Shards
	}
	return []redlock.NodeReport{r}
}

func writeCheckTable(a *app, reports []redlock.NodeReport, same error, clocks []string) error {
	t := newTable(a.out, "NODE", "ADDR", "STATUS", "RUN_ID", "VERSION", "RTT", "CLOCK", "MAXMEMORY-POLICY", "APPENDONLY/FSYNC")
	var rows []redlock.NodeReport
	for _, r := range reports {
		rows = append(rows, shardsOf(r)...)
	}
	for _, r := range rows {
		if r.Err != nil {
			t.row(fmt.Sprint(r.Node), r.Addr, "DOWN: "+r.Err.Error(), "-", "-", "-", "-", "-", "-")
			continue
		}
		id := r.RunID
		if len(id) > 12 {
			id = id[:12]
		}
		t.row(fmt.Sprint(r.Node), r.Addr, "ok", id, r.Version, fmt.Sprintf("%.1fms", ms(r.RTT)),
			fmt.Sprintf("%+.1fms", ms(r.ClockOffset)), r.MaxmemoryPolicy, yesNo(r.AppendOnly)+"/"+r.AppendFsync)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range reports {
		for _, w := range r.Warnings {
			fmt.Fprintf(a.out, "warning: node %d (%s): %s\n", r.Node, r.Addr, w)
		}
	}
	for _, w := range clocks {
		fmt.Fprintf(a.out, "warning: %s\n", w)
	}
	if same != nil {
		fmt.Fprintf(a.out, "error: %v\n", same)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
