package redistest

import (
	"fmt"
	"net"
)

// loopback is the only address anything in this package listens on.
const loopback = "127.0.0.1"

// freePort returns a TCP port on the loopback interface that was free a
// moment ago. Another process may take it before it is used, so callers retry
// with a new port when binding fails.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}
