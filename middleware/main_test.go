package middleware

import (
	"os"
	"testing"
)

// TestMain runs the package's tests without completion records by default:
// withMeta gives every task of a test the same ID, so that a record would
// take the second of two distinct tasks for a re-delivery of the first. The
// tests of records (once_test.go) turn them on with WithCompletionWindow.
func TestMain(m *testing.M) {
	defaultWindow = 0
	os.Exit(m.Run())
}
