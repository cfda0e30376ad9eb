//go:build unix

package redistest

import (
	"fmt"
	"syscall"
	"testing"
)

// reserveClosedPort returns a loopback port that refuses connections and
// that nothing else can take until tb ends: a socket bound to it that never
// listens. A port merely found free was once handed by the kernel to a
// listener on ":0" (a worker's metrics server) while a test used it as its
// dead broker's address.
func reserveClosedPort(tb testing.TB) (int, error) {
	syscall.ForkLock.RLock() // no child started meanwhile inherits it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("reserve a closed port: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return 0, fmt.Errorf("reserve a closed port: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, fmt.Errorf("reserve a closed port: %w", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	return sa.(*syscall.SockaddrInet4).Port, nil
}
