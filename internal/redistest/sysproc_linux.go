package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL a server when the thread that started
// it exits, so that servers do not outlive a crashed or killed test binary.
// (The Go runtime does not retire the threads of ordinary goroutines.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
