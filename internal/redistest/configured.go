package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Server is a redis-server without a proxy, configured for tests of how
// clients reach it (TLS, ACL users, passwords) rather than of faults. Its
// plain port always serves loopback clients; set-up commands go through it
// before any password is required.
type Server struct {
	Port    int // plain TCP port on 127.0.0.1
	TLSPort int // TLS port when started WithTLS, else 0
	proc    *process
}

// ServerOption configures StartServer.
type ServerOption func(*serverSetup)

type serverSetup struct {
	args        [][]string // extra redis-server arguments
	tls         *TLSFiles
	clientCerts bool
	setup       [][]any // commands run once the server answers
	noDefault   bool
}

// WithTLS adds a TLS port serving files' server certificate; with
// clientCerts the server requires a client certificate signed by the CA.
func WithTLS(files TLSFiles, clientCerts bool) ServerOption {
	return func(s *serverSetup) { s.tls, s.clientCerts = &files, clientCerts }
}

// WithUser adds an ACL user allowed every command and key.
func WithUser(name, password string) ServerOption {
	return func(s *serverSetup) {
		s.setup = append(s.setup, []any{"acl", "setuser", name, "on", ">" + password, "~*", "&*", "+@all"})
	}
}

// WithPassword makes the default user require password (requirepass).
func WithPassword(password string) ServerOption {
	return func(s *serverSetup) { s.setup = append(s.setup, []any{"config", "set", "requirepass", password}) }
}

// WithoutDefaultUser disables the default user: clients must name a user.
func WithoutDefaultUser() ServerOption { return func(s *serverSetup) { s.noDefault = true } }

// WithArgs adds redis-server arguments.
func WithArgs(args ...string) ServerOption {
	return func(s *serverSetup) { s.args = append(s.args, args) }
}

// StartServer starts a configured redis-server, stopped by tb.Cleanup.
func StartServer(tb testing.TB, opts ...ServerOption) *Server {
	tb.Helper()
	var st serverSetup
	for _, o := range opts {
		o(&st)
	}
	bin := RequireServer(tb)
	dir, err := filepath.Abs(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	var errs []error
	for range portAttempts {
		s, err := st.start(bin, dir)
		if err == nil {
			tb.Cleanup(func() { _ = s.proc.kill() })
			if err := s.runSetup(st); err != nil {
				tb.Fatalf("redistest: configure server on port %d: %v", s.Port, err)
			}
			return s
		}
		errs = append(errs, err)
	}
	tb.Fatalf("redistest: start configured server: %v", errors.Join(errs...))
	return nil
}

func (st serverSetup) start(bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port}
	args := serverArgs(port, dir)
	if st.tls != nil {
		if s.TLSPort, err = freePort(); err != nil {
			return nil, err
		}
		auth := "no"
		if st.clientCerts {
			auth = "yes"
		}
		args = append(args, "--tls-port", strconv.Itoa(s.TLSPort), "--tls-cert-file", st.tls.ServerCert,
			"--tls-key-file", st.tls.ServerKey, "--tls-ca-cert-file", st.tls.CA, "--tls-auth-clients", auth)
	}
	for _, a := range st.args {
		args = append(args, a...)
	}
	s.proc, err = launch(bin, filepath.Join(dir, "port-"+strconv.Itoa(port)), port, args, nil)
	return s, err
}

func (s *Server) runSetup(st serverSetup) error {
	cmds := st.setup
	if st.noDefault {
		cmds = append(cmds, []any{"acl", "setuser", "default", "off"})
	}
	if len(cmds) == 0 {
		return nil
	}
	c := newSetupClient(s.Addr())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cmd := range cmds {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			return fmt.Errorf("%v: %w", cmd[:2], err)
		}
	}
	return nil
}

// Addr is the plain address, 127.0.0.1:Port.
func (s *Server) Addr() string { return net.JoinHostPort(loopback, strconv.Itoa(s.Port)) }

// TLSAddr is the TLS address, 127.0.0.1:TLSPort.
func (s *Server) TLSAddr() string { return net.JoinHostPort(loopback, strconv.Itoa(s.TLSPort)) }

// ClosedAddr returns a loopback address that refuses connections until tb
// ends, and that no listener can take meanwhile: a node that is down from
// the start.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	port, err := reserveClosedPort(tb)
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort(loopback, strconv.Itoa(port))
}
