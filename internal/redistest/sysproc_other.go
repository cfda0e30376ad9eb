//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux: servers are only
// stopped by the test's cleanup there.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
