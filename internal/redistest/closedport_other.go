//go:build !unix

package redistest

import "testing"

// reserveClosedPort returns a loopback port that was free a moment ago
// (elsewhere than on unix, nothing keeps it so).
func reserveClosedPort(testing.TB) (int, error) { return freePort() }
