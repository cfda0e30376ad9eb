package embedded

import "testing"

// StartT starts a server as Start does, failing the test if it cannot, and
// closes it when the test and its subtests are done.
func StartT(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start()
	if err != nil {
		tb.Fatalf("%v", err)
		return nil
	}
	tb.Cleanup(s.Close)
	return s
}
