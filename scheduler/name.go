package scheduler

import (
	"strings"
	"unicode"
)

// maxNameLen bounds job names (they are part of lock keys).
const maxNameLen = 200

// checkName rejects names that cannot be part of a lock key; any names
// another cron library gives (NewJobs) only if empty or too long.
func checkName(name string, anyName bool) error {
	switch {
	case name == "":
		return invalidf("empty job name: name each job (with gocron: gocron.WithName)")
	case len(name) > maxNameLen:
		return invalidf("job name %.20q…: longer than %d bytes", name, maxNameLen)
	case anyName:
	case strings.ContainsAny(name, "{}"):
		return invalidf("job name %q: contains '{' or '}'", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return invalidf("job name %q: contains whitespace or control characters", name)
	}
	return nil
}
