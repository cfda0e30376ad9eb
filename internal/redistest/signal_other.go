//go:build !unix

package redistest

import (
	"errors"
	"os"
)

// pause is not supported without Unix signals.
func pause(*os.Process) error { return errors.ErrUnsupported }

// resume is not needed without Unix signals: nothing can be paused.
func resume(*os.Process) error { return nil }
