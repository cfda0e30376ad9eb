// Package redlocktest gives tests a lock without redis-server: in-process
// Redis nodes whose keys expire in real time, and a *redlock.Client over
// them. Handlers decorated with the middleware, cron jobs wrapped by the
// scheduler and code calling redlock directly can then be unit-tested with
// the real lock, scripts and expiry included.
//
// The nodes are miniredis servers on free loopback ports, served from the
// test process: they cost no binary and start in microseconds, but they are
// not a stand-in for a fault test (no kill, pause or latency controls; for
// those, test against real redis-server processes).
package redlocktest

import (
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
)

// Nodes is the number of lock nodes NewClient starts: the smallest set that
// tolerates one failed node.
const Nodes = 3

// StartNodes starts n in-process Redis servers on free 127.0.0.1 ports and
// returns their redis:// URLs (for redlock.NewFromURLs, REDLOCK_NODES, or an
// asynq broker) and a function that stops them all. On error none is left
// running.
func StartNodes(n int) (urls []string, stop func(), err error) {
	return embedded.StartN(n)
}

// NewClient returns a *redlock.Client over Nodes in-process nodes, with a
// node timeout of one second (a loaded test machine may take longer than
// the default 50ms to answer); opts come after it and may override it. The
// client and the nodes are closed when the test and its subtests end.
func NewClient(tb testing.TB, opts ...redlock.Option) *redlock.Client {
	tb.Helper()
	urls, stop, err := StartNodes(Nodes)
	if err != nil {
		tb.Fatalf("redlocktest: %v", err)
	}
	tb.Cleanup(stop)
	c, err := redlock.NewFromURLs(urls, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		tb.Fatalf("redlocktest: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
