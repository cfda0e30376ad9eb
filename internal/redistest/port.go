package redistest

import (
	"fmt"
	"net"
	"sync"
)

// loopback is the only address anything in this package listens on.
const loopback = "127.0.0.1"

// issued remembers the ports handed out in this process, so that nodes
// started concurrently (or a node waiting to restart on its port) never get
// the same one. Another process may still take a port before it is used, so
// callers retry with a new port when binding fails.
var issued = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a TCP port on the loopback interface that was free a
// moment ago and was not handed out before in this process.
func freePort() (int, error) {
	issued.Lock()
	defer issued.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		if !issued.ports[port] {
			issued.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port: every port offered was already in use by this process")
}
