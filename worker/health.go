package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// health is what the last readiness probe found. Every change is logged
// once: a component going down at Warn with its address and cause, coming
// back at Info, and readiness both ways from the first probe on.
type health struct {
	log        *slog.Logger
	m          *metrics
	brokerAddr string // never credentials
	quorum     int
	// recovered is told that the broker (broker true) or the lock node at
	// addr answers again: the dependencies' lines about it may return.
	recovered func(addr string, broker bool)

	mu        sync.Mutex
	probed    bool
	ready     bool
	brokerErr error
	broker    statelog.State   // the broker's reachability, logged once per change
	nodes     []statelog.State // per lock node
	lockState string           // "ok", "degraded" or "no quorum"
	body      string           // /readyz's body
}

// probe is what one readiness probe found.
type probe struct {
	nodes     []redlock.NodeReport
	brokerErr error
	// sameServer is the node check's finding that two lock nodes are one
	// server (logged at Error by the check itself).
	sameServer error
}

// lockNodes is the lock nodes' side of a probe.
type lockNodes struct {
	state             string // "ok", "degraded" or "no quorum"
	up, total, quorum int
	down              []string // the down nodes with their causes
}

// startProbes probes readiness every ReadinessInterval until ctx ends; the
// returned channel is closed when it stopped.
func (w *Worker) startProbes(ctx context.Context) <-chan struct{} {
	return every(ctx, w.cfg.ReadinessInterval, func() { w.checkReady(ctx) })
}

// checkReady probes the broker and every lock node, logs what changed and
// updates the metrics and /readyz.
func (w *Worker) checkReady(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, max(w.cfg.ReadinessInterval, time.Second, w.cfg.NodeTimeout))
	defer cancel()
	nodes, err := lockadmin.PingNodes(pctx, w.locks)
	if err != nil {
		return // the worker is shutting down
	}
	brokerErr := w.ping.Ping(pctx).Err()
	if ctx.Err() != nil {
		return
	}
	ready := w.health.update(probe{nodes: nodes, brokerErr: brokerErr, sameServer: w.nodes.sameServer()})
	w.ready.Store(ready)
	boolGauge(w.metrics.ready, ready)
}

// update records a probe's results and logs every change; it returns
// whether the worker is ready.
func (h *health) update(p probe) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.probed
	if first {
		h.broker.Settle = statelog.Settle
		h.nodes = make([]statelog.State, len(p.nodes))
		for i := range h.nodes {
			h.nodes[i].Settle = statelog.Settle
		}
	}
	h.updateBroker(p.brokerErr, first)
	down := h.updateNodes(p.nodes, first)
	ln := lockNodes{up: len(p.nodes) - len(down), total: len(p.nodes), quorum: h.quorum, down: down}
	ln.state = lockState(ln.up, len(down), h.quorum)
	if ln.state != h.lockState && (!first || ln.state != "ok") {
		h.logLockState(ln)
	}
	h.lockState = ln.state
	boolGauge(h.m.quorumUp, ln.up >= h.quorum)
	boolGauge(h.m.degraded, ln.state == "degraded")

	ready := p.brokerErr == nil && ln.up >= h.quorum && p.sameServer == nil
	h.body = h.readyBody(ready, p, ln)
	if !first && ready != h.ready {
		h.logReadiness(ready)
	}
	h.probed, h.ready = true, ready
	return ready
}

// logStartReadiness logs the first probe's readiness: Run calls it once the
// worker has logged that it started, so that the lines come in that order.
func (h *health) logStartReadiness() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probed {
		h.logReadiness(h.ready)
	}
}

// logReadiness logs that the worker is ready, or not and why.
func (h *health) logReadiness(ready bool) {
	if ready {
		h.log.Info("worker ready")
	} else {
		h.log.Warn("worker not ready", "why", strings.TrimPrefix(h.body, "not ready: "))
	}
}

func (h *health) updateBroker(err error, first bool) {
	if err != nil {
		h.broker.Fail(h.log, slog.LevelWarn, "broker unreachable", err, "addr", h.brokerAddr)
	} else if h.broker.OK(h.log, "broker reachable again", "addr", h.brokerAddr) {
		h.recover(h.brokerAddr, true)
	}
	h.brokerErr = err
	boolGauge(h.m.brokerUp, err == nil)
}

// updateNodes logs each node that went down or came back (through
// statelog: a flapping node is one outage), and returns the down
// ones, described with their causes.
func (h *health) updateNodes(nodes []redlock.NodeReport, first bool) []string {
	var down []string
	for i, n := range nodes {
		if first {
			h.m.nodeErrors.WithLabelValues(n.Addr) // the series exists from the first probe on
		}
		if n.Err != nil {
			h.nodes[i].Fail(h.log, slog.LevelWarn, "lock node unreachable", cause(n.Err), "node", i, "addr", n.Addr)
			down = append(down, fmt.Sprintf("node %d (%s): %v", i, n.Addr, cause(n.Err)))
		} else if h.nodes[i].OK(h.log, "lock node reachable again", "node", i, "addr", n.Addr) {
			h.recover(n.Addr, false)
		}
		boolGauge(h.m.nodeUp.WithLabelValues(n.Addr), n.Err == nil)
	}
	return down
}

// recover tells recovered, if set, that a component answers again.
func (h *health) recover(addr string, broker bool) {
	if h.recovered != nil {
		h.recovered(addr, broker)
	}
}

func lockState(up, down, quorum int) string {
	switch {
	case up < quorum:
		return "no quorum"
	case down > 0:
		return "degraded"
	}
	return "ok"
}

func (h *health) logLockState(ln lockNodes) {
	switch ln.state {
	case "ok":
		h.log.Info("all lock nodes reachable", "nodes", ln.total)
	case "degraded":
		h.log.Warn("lock nodes degraded: a minority is down, locking still works but tolerates fewer failures",
			"up", ln.up, "nodes", ln.total, "quorum", ln.quorum, "down", ln.down)
	default:
		h.log.Warn("lock quorum lost: tasks that need a lock are requeued until a majority answers",
			"up", ln.up, "nodes", ln.total, "quorum", ln.quorum, "down", ln.down)
	}
}

// readyBody says what is down, for /readyz.
func (h *health) readyBody(ready bool, p probe, ln lockNodes) string {
	var parts []string
	if p.sameServer != nil {
		parts = append(parts, p.sameServer.Error())
	}
	if p.brokerErr != nil {
		parts = append(parts, fmt.Sprintf("broker %s unreachable: %v", h.brokerAddr, p.brokerErr))
	}
	if ln.state != "ok" {
		what := "lock quorum lost"
		if ln.state == "degraded" {
			what = "lock nodes degraded"
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d lock nodes up (quorum %d); down: %s",
			what, ln.up, ln.total, ln.quorum, strings.Join(ln.down, "; ")))
	}
	if ready {
		if len(parts) == 0 {
			return "ready"
		}
		return "ready (" + strings.Join(parts, "; ") + ")"
	}
	return "not ready: " + strings.Join(parts, "; ")
}

// readyz returns /readyz's status and body.
func (h *health) readyz(shuttingDown bool) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case shuttingDown:
		return false, "not ready: shutting down"
	case !h.probed:
		return false, "not ready: not probed yet"
	}
	return h.ready, h.body
}

// cause strips a node error to its cause: the node and address are logged
// beside it.
func cause(err error) error {
	if ne, ok := err.(*redlock.NodeError); ok {
		return ne.Err
	}
	return err
}
