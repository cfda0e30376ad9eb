package integration

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// TestProofColdStartBesideBusyLoops (issue 20, finding 8): the first fenced
// TryAcquire of a fresh client, with one node of five paused, beside two
// goroutines that keep the CPUs busy. Every dial takes a second (a slow
// network, forced by the clients' dialer) against a node timeout of 500ms,
// so a first call that dials inside its node timeout always fails; the
// client must dial and load its scripts before the call's clock starts.
// Once dialed, a round trip is a local one, far inside the node timeout.
func TestProofColdStartBesideBusyLoops(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	if err := c.Nodes[4].Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Nodes[4].Cont() }()
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 2 {
		busy.Go(func() {
			for spins := 0; spins < 1<<40; spins++ { // bounded; ends at stop
				if spins%1024 == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	begin := time.Now()
	clients := make([]redis.UniversalClient, len(c.Nodes))
	for i, n := range c.Nodes {
		o := redistest.ClientOptions(n.Addr())
		o.DialTimeout = 3 * time.Second
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			time.Sleep(time.Second)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		clients[i] = rc
	}
	cl, err := redlock.New(clients, redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	l, err := cl.TryAcquire(within(t, time.Minute), "report", 10*time.Second, redlock.WithFencing())
	took := time.Since(begin)
	close(stop)
	busy.Wait()
	bad := 0
	if err != nil {
		bad = 1
	}
	report.Add(Row{
		Scenario: fmt.Sprintf("cold start: a fresh client's first fenced TryAcquire, 5 nodes, beside 2 busy loops (%d CPUs)", runtime.NumCPU()),
		Fault:    "node 5 SIGSTOPped; every dial takes 1s against a node timeout of 500ms",
		Ops:      1 - bad, Violations: 0,
		Notes: fmt.Sprintf("first call answered after %v (the client dials and loads its scripts when made; a first call waits for that, at most 4 node timeouts): %v",
			took.Round(time.Millisecond), errOK(err)),
	})
	t.Logf("first call answered after %v", took)
	if err != nil {
		t.Fatalf("a fresh client's first fenced TryAcquire: %v", err)
	}
	_ = l.Release(within(t, time.Minute))
}

func errOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
