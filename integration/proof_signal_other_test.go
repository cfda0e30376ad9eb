//go:build !unix

package integration

import (
	"errors"
	"os"
)

// pauseProcess is not supported without Unix signals.
func pauseProcess(*os.Process) error { return errors.ErrUnsupported }

// resumeProcess is not needed without Unix signals: nothing can be paused.
func resumeProcess(*os.Process) error { return nil }
