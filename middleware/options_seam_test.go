package middleware

import "time"

// Options of a Room's parts alone, and of the rollback's bound, for tests
// that set one of them.

func withRunGate(g *runGate) Option { return func(c *config) { c.runGate = g } }

// The room seams configure a room explicitly: no default wait places.
func withWaitCap(w *waitCap) Option { return func(c *config) { c.waitCap, c.room = w, true } }

func withMaxWaiters(n int) Option { return func(c *config) { c.maxWaiters, c.room = n, true } }

func withRollbackTimeout(d time.Duration) Option { return func(c *config) { c.rollbackTimeout = d } }

func withBackstop(d time.Duration) Option { return func(c *config) { c.backstop = d } }
