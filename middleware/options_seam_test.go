package middleware

import "time"

// Options of a Room's parts alone, and of the rollback's bound, for tests
// that set one of them. Setting a part of a room drops the default cap.

func withRunGate(g *runGate) Option {
	return func(c *config) { c.runGate, c.roomSet = g, true }
}

func withWaitCap(w *waitCap) Option {
	return func(c *config) { c.waitCap, c.roomSet = w, true }
}

func withMaxWaiters(n int) Option {
	return func(c *config) { c.maxWaiters, c.roomSet = n, true }
}

func withRollbackTimeout(d time.Duration) Option { return func(c *config) { c.rollbackTimeout = d } }
