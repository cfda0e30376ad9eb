package middleware

import (
	"os"
	"testing"
)

// TestMain runs the package's tests without completion records by default:
// withMeta gives every task of a test the same ID, so that a record would
// take the second of two distinct tasks for a re-delivery of the first. The
// tests of records (once_test.go) turn them on with WithCompletionWindow.
// A failing state ends at the first call that works (no settle time), so
// that the tests of log lines see an outage's end at once; statelog
// tests the settle time itself.
func TestMain(m *testing.M) {
	defaultWindow = 0
	recoverySettle = 0
	os.Exit(m.Run())
}
