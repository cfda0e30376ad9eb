package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockadmin"
	"github.com/asynqlock/asynqlock/redlock"
)

// health is what the last readiness probe found. Every change is logged
// once: a component going down at Warn with its address and cause, coming
// back at Info, and readiness both ways from the first probe on.
type health struct {
	mu        sync.Mutex
	probed    bool
	ready     bool
	brokerErr error
	nodeErr   []error // per lock node, nil while it answers
	lockState string  // "ok", "degraded" or "no quorum"
	body      string  // /readyz's body
}

// checkReady probes the broker and every lock node, logs what changed and
// updates the metrics and /readyz.
func (w *Worker) checkReady(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, max(w.probe, time.Second, w.cfg.NodeTimeout))
	defer cancel()
	nodes, err := lockadmin.PingNodes(pctx, w.locks)
	if err != nil {
		return // the worker is shutting down
	}
	brokerErr := w.ping.Ping(pctx).Err()
	if ctx.Err() != nil {
		return
	}
	ready := w.health.update(w.log, w.metrics, w.brokerAddr, nodes, brokerErr, lockadmin.Quorum(w.locks), w.nodes.sameServer())
	w.ready.Store(ready)
	boolGauge(w.metrics.ready, ready)
}

// update records a probe's results and logs every change; it returns
// whether the worker is ready. sameServer is the node check's finding that
// two lock nodes are one server (logged at Error by the check itself).
func (h *health) update(log *slog.Logger, m *metrics, brokerAddr string, nodes []lockadmin.NodeStatus, brokerErr error, quorum int, sameServer error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.probed
	if first {
		h.nodeErr = make([]error, len(nodes))
	}
	h.updateBroker(log, m, brokerAddr, brokerErr, first)
	down := h.updateNodes(log, m, nodes, first)
	up := len(nodes) - len(down)
	state := lockState(up, len(down), quorum)
	if state != h.lockState && (!first || state != "ok") {
		h.logLockState(log, state, up, len(nodes), quorum, down)
	}
	h.lockState = state
	boolGauge(m.quorumUp, up >= quorum)
	boolGauge(m.degraded, state == "degraded")

	ready := brokerErr == nil && up >= quorum && sameServer == nil
	h.body = readyBody(ready, brokerAddr, brokerErr, state, up, len(nodes), quorum, down, sameServer)
	if first || ready != h.ready {
		if ready {
			log.Info("worker ready")
		} else {
			log.Warn("worker not ready", "why", strings.TrimPrefix(h.body, "not ready: "))
		}
	}
	h.probed, h.ready = true, ready
	return ready
}

func (h *health) updateBroker(log *slog.Logger, m *metrics, addr string, err error, first bool) {
	if first || (h.brokerErr == nil) != (err == nil) {
		if err != nil {
			log.Warn("broker unreachable", "addr", addr, "err", err)
		} else if !first {
			log.Info("broker reachable again", "addr", addr)
		}
	}
	h.brokerErr = err
	boolGauge(m.brokerUp, err == nil)
}

// updateNodes logs each node that went down or came back, and returns the
// down ones, described with their causes.
func (h *health) updateNodes(log *slog.Logger, m *metrics, nodes []lockadmin.NodeStatus, first bool) []string {
	var down []string
	for i, n := range nodes {
		was := h.nodeErr[i]
		if (first || was == nil) && n.Err != nil {
			log.Warn("lock node unreachable", "node", i, "addr", n.Addr, "err", cause(n.Err))
		} else if was != nil && n.Err == nil {
			log.Info("lock node reachable again", "node", i, "addr", n.Addr)
		}
		h.nodeErr[i] = n.Err
		boolGauge(m.nodeUp.WithLabelValues(n.Addr), n.Err == nil)
		if n.Err != nil {
			down = append(down, fmt.Sprintf("node %d (%s): %v", i, n.Addr, cause(n.Err)))
		}
	}
	return down
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

func (h *health) logLockState(log *slog.Logger, state string, up, total, quorum int, down []string) {
	switch state {
	case "ok":
		log.Info("all lock nodes reachable", "nodes", total)
	case "degraded":
		log.Warn("lock nodes degraded: a minority is down, locking still works but tolerates fewer failures",
			"up", up, "nodes", total, "quorum", quorum, "down", down)
	default:
		log.Warn("lock quorum lost: tasks that need a lock are requeued until a majority answers",
			"up", up, "nodes", total, "quorum", quorum, "down", down)
	}
}

// readyBody says what is down, for /readyz.
func readyBody(ready bool, brokerAddr string, brokerErr error, state string, up, total, quorum int, down []string, sameServer error) string {
	var parts []string
	if sameServer != nil {
		parts = append(parts, sameServer.Error())
	}
	if brokerErr != nil {
		parts = append(parts, fmt.Sprintf("broker %s unreachable: %v", brokerAddr, brokerErr))
	}
	if state != "ok" {
		what := "lock quorum lost"
		if state == "degraded" {
			what = "lock nodes degraded"
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d lock nodes up (quorum %d); down: %s",
			what, up, total, quorum, strings.Join(down, "; ")))
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
