package embedded

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// Server is an in-process Redis listening on a loopback port, with keys
// expiring in real time. Its methods are safe for concurrent use.
type Server struct {
	mr      *miniredis.Miniredis
	srv     atomic.Pointer[server.Server] // mr's server, kept: mr.Server() reads a field Close clears without a lock
	addr    string
	runID   string // INFO server run_id
	version string // INFO server redis_version
	port    int    // INFO server tcp_port

	done chan struct{} // closed by Close: stops tickEvery

	restart   sync.Mutex // Stop and Restart
	stopped   bool       // by Stop, until Restart
	closeOnce sync.Once
	ticking   sync.WaitGroup
}

// Start starts an embedded Redis on a free 127.0.0.1 port whose TTLs expire
// in real time and whose TIME is the wall clock (see the package
// documentation). It answers INFO (server section included, with a run_id of
// its own) and CONFIG GET as lock-node checks expect of a redis-server (see
// settings). Close it when done.
func Start(opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	mr := miniredis.NewMiniRedis()
	mr.ClockTTL(o.tick == 0)
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: start miniredis: %w", err)
	}
	srv := mr.Server()
	s := &Server{mr: mr, addr: mr.Addr(), runID: newRunID(), version: miniredisVersion(), port: srv.Addr().Port,
		done: make(chan struct{})}
	// Nobody knows the port yet, so no command arrives before these are in place.
	if err := s.serve(srv); err != nil {
		mr.Close()
		return nil, err
	}
	if o.tick > 0 {
		s.ticking.Add(1)
		go s.tickEvery(o.tick)
	}
	return s, nil
}

// Option changes what Start starts.
type Option func(*options)

type options struct {
	tick time.Duration // 0: exact expiry (ClockTTL)
}

// WithCoarseExpiry makes TTLs run down by the elapsed time once every tick
// rather than at every command, so that a key may expire up to a tick (plus
// scheduling delays) early. Exact expiry costs every command a sorted walk
// over all keys (miniredis's ClockTTL), which dominates a broker holding
// thousands of queued tasks; a broker or a data store whose TTLs are coarse
// (asynq's, minutes or more) can take this. Never for lock nodes: a lock
// key that expires early breaks the lock's validity.
func WithCoarseExpiry(tick time.Duration) Option {
	return func(o *options) { o.tick = tick }
}

// tickEvery advances the TTLs by the monotonic time elapsed, every tick,
// until Close.
func (s *Server) tickEvery(tick time.Duration) {
	defer s.ticking.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mr.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr returns the address the server listens on, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// URL returns the server's address as a "redis://127.0.0.1:port" URL.
func (s *Server) URL() string { return "redis://" + s.addr }

// Miniredis returns the underlying miniredis, for inspection and fault
// injection (for example SetError). Calling SetTime on it freezes TIME and
// the expiry clock at the given instant. Its SetError replaces the hook that
// answers INFO: after SetError(""), INFO is miniredis's own again (no server
// section).
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mr }

// Close stops the server and closes its client connections. It is safe to
// call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.ticking.Wait()
	s.mr.Close()
}

// StartN starts n servers (see Start) and returns their "redis://" URLs and
// a function that closes them all. On error none is left running.
func StartN(n int) (urls []string, stop func(), err error) {
	var servers []*Server
	stop = func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for range n {
		s, err := Start()
		if err != nil {
			stop()
			return nil, nil, err
		}
		servers = append(servers, s)
		urls = append(urls, s.URL())
	}
	return urls, stop, nil
}
