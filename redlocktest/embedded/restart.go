package embedded

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2/server"
)

// serve adds to srv, a miniredis server just started, what Start promises
// beyond miniredis: CONFIG GET and the INFO sections of a redis-server.
func (s *Server) serve(srv *server.Server) error {
	if err := srv.Register("CONFIG", s.config); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	srv.SetPreHook(s.info)
	s.srv.Store(srv)
	return nil
}

// Stop closes the server's listener and its client connections but keeps
// its keys, as a redis-server killed with its data on disk: clients see the
// connection refused until Restart. TTLs keep running down meanwhile, as a
// restarted redis-server finds its keys' absolute expiry times. Stop after
// Close, or twice, does nothing.
func (s *Server) Stop() {
	s.restart.Lock()
	defer s.restart.Unlock()
	s.mr.Close()
	s.stopped = true
}

// Restart serves the server's keys again on the same address after Stop, so
// that clients reconnect to it as to a restarted redis-server (the run_id
// stays: the data did not change hands). It fails if the port was taken
// meanwhile, or if the server was not stopped. A command that arrives in the instant between the listener's
// start and the return of Restart may see miniredis's INFO and no CONFIG.
func (s *Server) Restart() error {
	s.restart.Lock()
	defer s.restart.Unlock()
	select {
	case <-s.done:
		return fmt.Errorf("embedded: Restart of %s after Close", s.addr)
	default:
	}
	if !s.stopped {
		return fmt.Errorf("embedded: Restart of %s, which is running: Stop it first", s.addr)
	}
	// Close cancelled miniredis's context, and miniredis's restart keeps
	// it: every blocking command (BLPOP, XREAD BLOCK...) would then
	// return at once without a reply. No connection is left to read it.
	s.mr.Ctx, s.mr.CtxCancel = context.WithCancel(context.Background())
	if err := s.mr.Restart(); err != nil {
		return fmt.Errorf("embedded: restart on %s: %w", s.addr, err)
	}
	if err := s.serve(s.mr.Server()); err != nil {
		s.mr.Close()
		return err
	}
	s.stopped = false
	return nil
}
