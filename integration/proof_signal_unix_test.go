//go:build unix

package integration

import (
	"os"
	"syscall"
)

// pauseProcess sends SIGSTOP to p; with a nil p it only reports whether
// pausing is supported (nil when it is).
func pauseProcess(p *os.Process) error {
	if p == nil {
		return nil
	}
	return p.Signal(syscall.SIGSTOP)
}

// resumeProcess sends SIGCONT to p.
func resumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
