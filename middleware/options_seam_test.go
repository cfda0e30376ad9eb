package middleware

import "time"

// Options of a room's parts alone, and of the rollback's bound, for tests
// that set one of them.

// roomOf returns c's room, made (the default share, no places) if none.
func (c *config) roomOf() *room {
	if c.room == nil {
		c.room = &room{maxWaiters: defaultMaxWaiters}
	}
	return c.room
}

func withRunGate(g *runGate) Option { return func(c *config) { c.roomOf().run = g } }

func withWaitCap(w *waitCap) Option { return func(c *config) { c.roomOf().wait = w } }

func withMaxWaiters(n int) Option { return func(c *config) { c.roomOf().maxWaiters = n } }

func withRollbackTimeout(d time.Duration) Option { return func(c *config) { c.rollbackTimeout = d } }

func withBackstop(d time.Duration) Option { return func(c *config) { c.backstop = d } }
