package integration

import (
	"fmt"
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
// goroutines that keep the CPUs busy. The four live nodes answer a round
// trip in 500ms or more (250ms of proxy latency each way) against a node
// timeout of 900ms; a cold connection needs two (the dial's handshake, then
// the call with its script load), so the first call fails unless the client
// dials and loads its scripts before the call's clock starts. The clients'
// read timeout is 3s, far above a round trip.
func TestProofColdStartBesideBusyLoops(t *testing.T) {
	c := redistest.StartCluster(t, 5)
	if err := c.Nodes[4].Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Nodes[4].Cont() }()
	for _, n := range c.Nodes[:4] {
		n.SetLatency(250 * time.Millisecond)
	}
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
		o.ReadTimeout, o.WriteTimeout = 3*time.Second, 3*time.Second
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		clients[i] = rc
	}
	cl, err := redlock.New(clients, redlock.WithNodeTimeout(900*time.Millisecond))
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
		Fault:    "node 5 SIGSTOPped; 250ms latency each way on the others, node timeout 900ms",
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
