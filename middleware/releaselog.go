package middleware

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/statelog"
)

// releaseState logs failing releases once per change of state (Warn with
// the failed nodes, then Info once they work): nodes that are down fail every
// task's release alike. A closed client or a lock not held any more is no
// node failure: Debug, the state unchanged.
func (m *mw) releaseState(log taskLog, err error) {
	switch {
	case errors.Is(err, redlock.ErrClosed) || errors.Is(err, redlock.ErrNotHeld):
		log.Debug("lock not released", "err", err)
	case err != nil:
		m.releaseErr.Fail(m.cfg.logger, slog.LevelWarn, "lock releases failing; each lock expires at its TTL", err,
			"resource", log.res, "nodes", failedNodes(nil, err))
	case m.releaseErr.Failing() != "": // not per task: the arguments cost two allocations
		m.releaseErr.OK(m.cfg.logger, "lock releases work again", "resource", log.res)
	}
}

// failedNodes appends to addrs the addresses of the lock nodes that failed
// in err (its *redlock.NodeError values), each once, in the order found.
func failedNodes(addrs []string, err error) []string {
	switch e := err.(type) {
	case *redlock.NodeError:
		if !slices.Contains(addrs, e.Addr) {
			addrs = append(addrs, e.Addr)
		}
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			addrs = failedNodes(addrs, x)
		}
	case interface{ Unwrap() error }:
		addrs = failedNodes(addrs, e.Unwrap())
	}
	return addrs
}

// failState is one kind of call's failing state (brokerState,
// releaseState), logged once per change through statelog.
type failState = statelog.State

// recoverySettle is how long a failing state must see no failure before a
// call that works ends it, lest a slow node log Warn and Info pairs
// milliseconds apart; a variable for tests that count one outage's lines.
var recoverySettle = statelog.Settle
