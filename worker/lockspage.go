package worker

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// parkedReader tells the /locks page which tasks wait parked for each
// resource (brokerParked reads the middleware's FIFOs); without one the page
// says that parking is not reported.
type parkedReader interface {
	// ParkedTasks returns the IDs of the tasks parked per resource, oldest
	// first.
	ParkedTasks(ctx context.Context) (map[string][]string, error)
}

// pageLimit bounds the resources the page lists.
const pageLimit = 500

// lockRoutes adds the /locks page unless WORKER_LOCKS_PAGE=false.
func (w *Worker) lockRoutes(mux *http.ServeMux) http.Handler {
	if w.cfg.LocksPage {
		mux.HandleFunc("GET /locks", w.serveLocks)
	}
	return mux
}

// serveLocks renders the page: read-only, nothing secret on it (node
// addresses without credentials, holders, short tokens).
func (w *Worker) serveLocks(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), max(20*w.cfg.NodeTimeout, 3*time.Second))
	defer cancel()
	v := w.pageView(ctx)
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := locksTemplate.Execute(rw, v); err != nil {
		w.log.Warn("locks page not rendered", "err", err)
	}
}

// pageView gathers what the page shows.
func (w *Worker) pageView(ctx context.Context) pageData {
	host, _ := os.Hostname()
	v := pageData{Host: host, Now: time.Now().UTC().Format(time.RFC3339), Prefix: w.cfg.LockPrefix, Quorum: lockadmin.Quorum(len(w.cfg.RedlockNodes))}
	reports, at, same := w.nodes.snapshot()
	if at.IsZero() { // the worker's first check has not finished
		_ = w.checkNodes(ctx)
		reports, at, same = w.nodes.snapshot()
	}
	v.Nodes, v.Warnings = nodeRows(reports)
	v.Warnings = append(v.Warnings, lockadmin.ClockWarnings(reports, lockadmin.ClockSkew)...)
	if !at.IsZero() {
		v.CheckedAgo = time.Since(at).Round(time.Second).String()
	}
	if same != nil {
		v.Errors = append(v.Errors, same.Error())
	}
	var parked map[string][]string
	if w.parked != nil {
		v.Parking = true
		var err error
		if parked, err = w.parked.ParkedTasks(ctx); err != nil {
			v.Errors = append(v.Errors, "parked tasks not read: "+err.Error())
		}
	}
	listing, err := lockadmin.List(ctx, w.locks, "", pageLimit)
	if err != nil {
		v.Errors = append(v.Errors, "locks not listed: "+err.Error())
		return v
	}
	for _, e := range listing.ScanErrs {
		if e != nil {
			v.Errors = append(v.Errors, "not scanned, locks held only there are missing: "+e.Error())
		}
	}
	v.Truncated = listing.Truncated
	locks, ticks := splitTicks(listing.Locks)
	v.Locks = lockRows(locks, parked, lockadmin.Quorum(len(w.cfg.RedlockNodes)))
	w.seen.age(v.Locks, time.Now())
	v.Ticks = tickRows(ticks)
	return v
}

// pageData is the page's content, formatted.
type pageData struct {
	Host, Now, Prefix, CheckedAgo string
	Quorum                        int
	Nodes                         []nodeRow
	Locks                         []lockRow
	Ticks                         []tickRow
	Warnings, Errors              []string
	Parking, Truncated            bool
}

type nodeRow struct {
	Node                                 int
	Addr, Status, RunID, Version         string
	RTT, Clock, Policy, Persistence, Err string
	Up                                   bool
}

type lockRow struct {
	Resource, Holder, Token, Nodes, TTL, Fence string
	Slot                                       string // "slot 1" under a limit, else ""
	Minority                                   bool   // the claim lacks a quorum: leftovers or a split
	Parked                                     []string
	Held                                       string    // how long it has been held, at least
	since                                      time.Time // when this worker first saw the claim
	token                                      string    // the whole token, which identifies the claim
}

func nodeRows(reports []redlock.NodeReport) ([]nodeRow, []string) {
	var rows []nodeRow
	var texts []string
	byText := map[string][]string{} // one line per warning, naming its nodes
	for _, r := range reports {
		row := nodeRow{Node: r.Node, Addr: r.Addr, Up: r.Err == nil, Status: "up"}
		if r.Err != nil {
			row.Status, row.Err = "down", r.Err.Error()
			rows = append(rows, row)
			continue
		}
		row.RunID, row.Version = shortID(r.RunID, 12), r.Version
		row.RTT = r.RTT.Round(10 * time.Microsecond).String()
		row.Clock = r.ClockOffset.Round(100 * time.Microsecond).String()
		row.Policy = r.MaxmemoryPolicy
		row.Persistence = "appendonly no"
		if r.AppendOnly {
			row.Persistence = "appendonly yes, fsync " + r.AppendFsync
		}
		rows = append(rows, row)
		for _, w := range r.Warnings {
			if byText[w] == nil {
				texts = append(texts, w)
			}
			byText[w] = append(byText[w], r.Addr)
		}
	}
	warnings := make([]string, len(texts))
	for i, w := range texts {
		warnings[i] = "node " + strings.Join(byText[w], ", ") + ": " + w
	}
	return rows, warnings
}

// lockRows is one row per claim of each resource, then rows for resources
// that have parked tasks but no lock.
func lockRows(locks []lockadmin.HeldLock, parked map[string][]string, quorum int) []lockRow {
	var rows []lockRow
	seen := map[string]bool{}
	for _, l := range locks {
		seen[l.Resource] = true
		claims := lockadmin.Claims(l.Nodes)
		if len(claims) == 0 { // found by the scan; the nodes that hold it did not answer
			rows = append(rows, lockRow{Resource: l.Resource, Holder: "unknown: " + unanswered(l.Nodes), Minority: true, Fence: "-", Parked: parked[l.Resource]})
		}
		for i, c := range claims {
			row := lockRow{Resource: l.Resource, Slot: c.SlotText(), Holder: c.Holder.String(), Token: shortID(c.Token, 8), token: c.Token,
				Nodes: nodesText(c.Nodes, lockadmin.NodeCount(l.Nodes)), TTL: c.TTL.Round(time.Millisecond).String(), Minority: len(c.Nodes) < quorum, Fence: "-"}
			if c.Fence > 0 {
				row.Fence = strconv.FormatInt(c.Fence, 10)
			}
			if i == 0 {
				row.Parked = parked[l.Resource]
			}
			rows = append(rows, row)
		}
	}
	var waiting []string
	for r := range parked {
		if !seen[r] && len(parked[r]) > 0 {
			waiting = append(waiting, r)
		}
	}
	slices.Sort(waiting)
	for _, r := range waiting {
		rows = append(rows, lockRow{Resource: r, Holder: "(not held)", Fence: "-", Parked: parked[r]})
	}
	return rows
}

// unanswered says which nodes failed to describe a resource.
func unanswered(states []redlock.NodeState) string {
	var parts []string
	for _, s := range states {
		if s.Err != nil {
			parts = append(parts, fmt.Sprintf("node %d (%s): %v", s.Node, s.Addr, s.Err))
		}
	}
	return strings.Join(parts, "; ")
}

// shortID is the first n characters of an ID or of a token's random part.
func shortID(s string, n int) string {
	s, _, _ = strings.Cut(s, "|")
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// nodesText is "3/5 (0,1,2)": how many nodes of all, and which.
func nodesText(nodes []int, total int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("%d/%d (%s)", len(nodes), total, strings.Join(s, ","))
}

//go:embed locks.html
var locksHTML string

var locksTemplate = template.Must(template.New("locks").Parse(locksHTML))
