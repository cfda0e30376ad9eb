package embedded

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// Server is an in-process Redis listening on a loopback port, with keys
// expiring in real time. Its methods are safe for concurrent use.
type Server struct {
	mr   *miniredis.Miniredis
	addr string
}

// Start starts an embedded Redis on a free 127.0.0.1 port whose TTLs expire
// in real time and whose TIME is the wall clock (see the package
// documentation). Close it when done.
func Start() (*Server, error) {
	mr := miniredis.NewMiniRedis()
	mr.ClockTTL(true)
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: start miniredis: %w", err)
	}
	return &Server{mr: mr, addr: mr.Addr()}, nil
}

// Addr returns the address the server listens on, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// URL returns the server's address as a "redis://127.0.0.1:port" URL.
func (s *Server) URL() string { return "redis://" + s.addr }

// Miniredis returns the underlying miniredis, for inspection and fault
// injection (for example SetError). Calling SetTime on it freezes TIME and
// the expiry clock at the given instant.
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mr }

// Close stops the server and closes its client connections. It is safe to
// call more than once.
func (s *Server) Close() { s.mr.Close() }

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
