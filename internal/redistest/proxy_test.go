package redistest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// startEcho starts a loopback TCP server echoing what it reads, stopped at
// cleanup, and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// startProxy starts a proxy to backend, closed at cleanup.
func startProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	p, err := newProxy(backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// echoes sends line on c and reports whether it comes back within d.
func echoes(t *testing.T, c *rawConn, line string, d time.Duration) bool {
	t.Helper()
	c.send(t, line)
	got, err := c.readLine(d)
	return err == nil && got == line+"\r\n"
}

func TestProxyBlackHoleHoldsNewConnectionsUntilHeal(t *testing.T) {
	p := startProxy(t, startEcho(t))
	p.blackHole()
	c := dialRaw(t, p.addr()) // accepted, but nothing is forwarded
	if echoes(t, c, "one", 100*time.Millisecond) {
		t.Fatal("data went through a black hole")
	}
	p.heal()
	if got, err := c.readLine(5 * time.Second); err != nil || got != "one\r\n" {
		t.Errorf("held data after heal = %q, %v", got, err)
	}
}

func TestProxyLatencyAppliesBothWays(t *testing.T) {
	p := startProxy(t, startEcho(t))
	c := dialRaw(t, p.addr())
	if !echoes(t, c, "warm", 5*time.Second) {
		t.Fatal("no echo")
	}
	const latency = 50 * time.Millisecond
	p.setLatency(latency)
	start := time.Now()
	if !echoes(t, c, "slow", 5*time.Second) {
		t.Fatal("no echo with latency")
	}
	if took := time.Since(start); took < 2*latency {
		t.Errorf("round trip with %v latency each way took %v", latency, took)
	}
}

func TestProxyClosesClientWhenBackendIsDown(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, net.JoinHostPort(loopback, strconv.Itoa(port))) // nothing listens there
	c := dialRaw(t, p.addr())
	if got, err := c.readLine(5 * time.Second); err == nil || isTimeout(err) {
		t.Errorf("read through a proxy to a dead backend = %q, %v; want the connection closed", got, err)
	}
}

func TestProxyCloseReleasesEverything(t *testing.T) {
	p, err := newProxy(startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	held := dialRaw(t, p.addr())
	if !echoes(t, held, "x", 5*time.Second) {
		t.Fatal("no echo")
	}
	p.blackHole()
	held.send(t, "stuck") // a goroutine now waits in the black hole
	waiting := dialRaw(t, p.addr())
	waiting.send(t, "new") // and one waits before dialing

	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("proxy close did not return: goroutines leaked")
	}
	for _, c := range []*rawConn{held, waiting} {
		if got, err := c.readLine(5 * time.Second); err == nil || isTimeout(err) {
			t.Errorf("client read after proxy close = %q, %v; want the connection closed", got, err)
		}
	}
	if c, err := net.DialTimeout("tcp", p.addr(), time.Second); err == nil {
		_ = c.Close()
		t.Error("closed proxy still accepts connections")
	}
	p.close() // idempotent
}
