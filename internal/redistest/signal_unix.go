//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// pause sends SIGSTOP to p.
func pause(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resume sends SIGCONT to p.
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
