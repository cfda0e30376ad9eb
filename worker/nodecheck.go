package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// nodeCheck is what the last check of the lock nodes found, and what was
// logged of it: each problem is logged once when it appears.
type nodeCheck struct {
	mu      sync.Mutex
	reports []redlock.NodeReport
	at      time.Time
	same    error           // *lockadmin.SameServerError, nil while the nodes are independent
	warned  map[string]bool // warnings logged and still current
	runIDs  []string        // last run_id seen per node
}

// checkNodes runs Client.Check and logs what changed: two nodes that are one
// server at Error, each settings or clock warning at Warn, a node that
// restarted at Info (Warn when it keeps no data across a crash). It returns
// the same-server error, nil while the nodes are independent.
func (w *Worker) checkNodes(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, max(8*w.cfg.NodeTimeout, 2*time.Second))
	defer cancel()
	reports, err := w.locks.Admin().Check(cctx)
	if err != nil {
		return w.nodes.sameServer() // shutting down: keep what we knew
	}
	return w.nodes.update(w.log, reports, w.cfg.LockTTL, w.cfg.locks().Names())
}

// update records a check and logs the changes.
func (nc *nodeCheck) update(log *slog.Logger, reports []redlock.NodeReport, ttl time.Duration, names []string) error {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.warned == nil {
		nc.warned = map[string]bool{}
		nc.runIDs = make([]string, len(reports))
	}
	same := lockadmin.SameServer(reports)
	var se *lockadmin.SameServerError
	if errors.As(same, &se) {
		se.Addrs = names // the URLs tell two databases of one server apart
	}
	switch {
	case same != nil && (nc.same == nil || same.Error() != nc.same.Error()):
		log.Error("lock nodes are not independent: one server would cast several votes", "err", same)
	case same == nil && nc.same != nil:
		log.Info("lock nodes are independent again")
	}
	nc.same = same
	nc.logRestarts(log, reports, ttl)
	nc.logWarnings(log, reports)
	nc.reports, nc.at = reports, time.Now()
	return same
}

// logRestarts notes nodes whose run_id changed: they restarted.
func (nc *nodeCheck) logRestarts(log *slog.Logger, reports []redlock.NodeReport, ttl time.Duration) {
	for _, r := range reports {
		if r.Err != nil || r.RunID == "" || r.Node >= len(nc.runIDs) {
			continue
		}
		was := nc.runIDs[r.Node]
		nc.runIDs[r.Node] = r.RunID
		switch {
		case was == "" || was == r.RunID:
		case lockadmin.SurvivesRestart(r):
			log.Info("lock node restarted", "node", r.Node, "addr", r.Addr)
		default:
			log.Warn("lock node restarted and keeps no data across a crash: Redlock needs it to stay down for at least the lock TTL after a crash, or a lock it held can be granted twice",
				"node", r.Node, "addr", r.Addr, "ttl", ttl.String())
		}
	}
}

// logWarnings logs each settings or clock warning once, when it appears.
func (nc *nodeCheck) logWarnings(log *slog.Logger, reports []redlock.NodeReport) {
	current := map[string]bool{}
	for _, r := range reports {
		for _, w := range r.Warnings {
			key := fmt.Sprintf("%d\x00%s", r.Node, w)
			current[key] = true
			if !nc.warned[key] {
				log.Warn("lock node setting breaks a Redlock assumption", "node", r.Node, "addr", r.Addr, "warning", w)
			}
		}
	}
	for _, w := range lockadmin.ClockWarnings(reports, lockadmin.ClockSkew) {
		current[w] = true
		if !nc.warned[w] {
			log.Warn("clock far from the lock nodes'", "warning", w)
		}
	}
	nc.warned = current
}

// sameServer is the last check's same-server error.
func (nc *nodeCheck) sameServer() error {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.same
}

// anyDown reports whether a node failed the last check.
func (nc *nodeCheck) anyDown() bool {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return slices.ContainsFunc(nc.reports, func(r redlock.NodeReport) bool { return r.Err != nil })
}

// snapshot returns the last check's reports and when it ran.
func (nc *nodeCheck) snapshot() ([]redlock.NodeReport, time.Time, error) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return slices.Clone(nc.reports), nc.at, nc.same
}

// startNodeCheck checks the nodes before the worker starts: two nodes that
// are one server, or a cluster member given as a single server, refuse the
// start. Then it checks them every
// NodeCheckInterval until ctx ends; the returned channel is closed when it
// stopped.
func (w *Worker) startNodeCheck(ctx context.Context) (<-chan struct{}, error) {
	if err := w.checkNodes(ctx); err != nil {
		return nil, fmt.Errorf("worker: refusing to start: %w", err)
	}
	reports, _, _ := w.nodes.snapshot()
	if err := lockadmin.ClusterAsSingle(reports); err != nil {
		return nil, fmt.Errorf("worker: refusing to start: %w", err)
	}
	if err := w.misconfigured(); err != nil {
		return nil, fmt.Errorf("worker: refusing to start: %w", err)
	}
	// Tick at the readiness interval, check every NodeCheckInterval, or at
	// once while a node is down: one that comes back is compared within a
	// tick of its return.
	interval := w.cfg.NodeCheckInterval
	return every(ctx, min(w.cfg.ReadinessInterval, interval), func() {
		if _, at, _ := w.nodes.snapshot(); time.Since(at) >= interval || w.nodes.anyDown() {
			_ = w.checkNodes(ctx)
		}
	}), nil
}
