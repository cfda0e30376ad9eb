package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// ServerEnv names the environment variable that, when set, gives the path of
// the redis-server binary to use instead of looking it up in PATH.
const ServerEnv = "REDISTEST_SERVER"

// fallbackServerPaths are tried when redis-server is not in PATH, which can be
// minimal in CI jobs.
var fallbackServerPaths = []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"}

// RequireServer returns the path of the redis-server binary.
//
// When no server is found it fails the test with tb.Fatalf if the environment
// variable CI is "true", so that CI never silently skips integration tests,
// and otherwise skips the test with tb.Skipf, saying loudly that the
// integration tests are skipped and how to install the server.
func RequireServer(tb testing.TB) string {
	tb.Helper()
	return requireServer(tb, lookupServer)
}

// requireServer is RequireServer with an injectable lookup, for tests.
func requireServer(tb testing.TB, lookup func() (string, error)) string {
	tb.Helper()
	path, err := lookup()
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: redis-server is required when CI=true and was not found: %v; "+
			"install it with `apt-get install redis-server` (or set %s to its path)", err, ServerEnv)
		return ""
	}
	tb.Skipf("redistest: *** INTEGRATION TESTS SKIPPED ***: redis-server not found: %v; "+
		"install it with `apt-get install redis-server` (or set %s to its path) to run them", err, ServerEnv)
	return ""
}

// lookupServer finds an executable redis-server: ServerEnv first, then PATH,
// then fallbackServerPaths.
func lookupServer() (string, error) {
	if p := os.Getenv(ServerEnv); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", ServerEnv, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range fallbackServerPaths {
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", errors.New("redis-server is not in PATH nor in /usr/bin or /usr/local/bin")
}

// checkExecutable reports why path is not an executable regular file, or nil.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
