package scheduler

import (
	"fmt"
	"strings"
	"unicode"
)

// maxNameLen bounds job names (they are part of lock keys).
const maxNameLen = 200

// checkName rejects names that cannot be part of a lock key.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w %.20q…: longer than %d bytes", ErrInvalidName, name, maxNameLen)
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("%w %q: contains '{' or '}'", ErrInvalidName, name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("%w %q: contains whitespace or control characters", ErrInvalidName, name)
	}
	return nil
}
