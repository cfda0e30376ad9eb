//go:build unix

package redistest

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failFast bounds calls that must fail without waiting for a timeout; it is
// generous because only a timeout would come close.
const failFast = 2 * time.Second

// processGone reports whether no process has the given pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestClusterSetGet(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 {
		t.Fatalf("got %d nodes, want 3", len(c.Nodes))
	}
	seen := map[string]bool{}
	for i, addr := range c.Addrs() {
		if !strings.HasPrefix(addr, "127.0.0.1:") || seen[addr] {
			t.Errorf("address %d = %q: not loopback or not unique", i, addr)
		}
		seen[addr] = true
		if want := "redis://" + addr; c.URLs()[i] != want {
			t.Errorf("URL %d = %q, want %q", i, c.URLs()[i], want)
		}
		if n := c.Nodes[i]; n.ServerAddr() == addr || !n.Running() || n.PID() == 0 {
			t.Errorf("node %d: server %s, proxy %s, running %v, pid %d", i, n.ServerAddr(), addr, n.Running(), n.PID())
		}
	}

	ctx := ctxTimeout(t, 5*time.Second)
	clients := c.Clients(t)
	for i, cl := range clients {
		if err := cl.Set(ctx, "key", fmt.Sprint("value-", i), 0).Err(); err != nil {
			t.Fatalf("SET on node %d: %v", i, err)
		}
	}
	for i, cl := range clients {
		if got, err := cl.Get(ctx, "key").Result(); err != nil || got != fmt.Sprint("value-", i) {
			t.Errorf("GET on node %d = %q, %v; want value-%d (nodes must be independent)", i, got, err, i)
		}
	}
	// The proxy forwards to the server itself.
	direct := Client(t, c.Nodes[1].ServerAddr())
	if got, err := direct.Get(ctx, "key").Result(); err != nil || got != "value-1" {
		t.Errorf("GET on node 1's server = %q, %v; want value-1", got, err)
	}
}

func TestKillFailsFastAndRestartComesBackEmpty(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := cl.Set(ctx, "key", "value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, serverAddr, pid := n.Addr(), n.ServerAddr(), n.PID()

	if err := n.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if n.Running() || n.PID() != 0 || !processGone(pid) {
		t.Fatalf("after Kill: running %v, pid %d, process %d gone %v", n.Running(), n.PID(), pid, processGone(pid))
	}
	for range 3 { // pooled and fresh connections alike
		start := time.Now()
		err := cl.Ping(ctx).Err()
		if err == nil || isTimeout(err) || time.Since(start) > failFast {
			t.Fatalf("PING to a killed node: %v after %v; want a fast non-timeout error", err, time.Since(start))
		}
	}
	if err := n.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}

	const delay = 50 * time.Millisecond
	start := time.Now()
	if err := n.Restart(delay); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("Restart(%v) returned after %v", delay, took)
	}
	if !n.Running() || n.Addr() != addr || n.ServerAddr() != serverAddr || n.PID() == pid {
		t.Fatalf("after Restart: running %v, addr %s (was %s), server %s (was %s), pid %d (was %d)",
			n.Running(), n.Addr(), addr, n.ServerAddr(), serverAddr, n.PID(), pid)
	}
	if err := cl.Get(ctx, "key").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after Restart: %v; want redis.Nil (data must be gone)", err)
	}
	if size, err := cl.DBSize(ctx).Result(); err != nil || size != 0 {
		t.Errorf("DBSIZE after Restart = %d, %v; want 0", size, err)
	}
}

func TestRestartKillsARunningNode(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)
	if err := cl.Set(ctx, "key", "value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := n.PID()
	if err := n.Restart(0); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if !processGone(pid) || n.PID() == pid {
		t.Errorf("old process %d still there after Restart", pid)
	}
	// The pooled connection went down with the old server.
	_ = cl.Ping(ctx).Err()
	if err := cl.Get(ctx, "key").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after Restart: %v; want redis.Nil", err)
	}
}

func TestStopHangsUntilCont(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	if err := cl.Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !n.Running() || !n.Stopped() {
		t.Fatalf("after Stop: running %v, stopped %v", n.Running(), n.Stopped())
	}
	const deadline = 200 * time.Millisecond
	start := time.Now()
	err := cl.Ping(ctxTimeout(t, deadline)).Err()
	if !isTimeout(err) {
		t.Fatalf("PING to a stopped node: %v; want a timeout", err)
	}
	if took := time.Since(start); took < deadline-20*time.Millisecond {
		t.Errorf("PING to a stopped node failed after %v, before its %v deadline", took, deadline)
	}
	if err := n.Cont(); err != nil {
		t.Fatalf("Cont: %v", err)
	}
	if n.Stopped() {
		t.Error("still stopped after Cont")
	}
	if err := cl.Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Errorf("PING after Cont: %v", err)
	}
}

func TestSetLatencyDelaysCalls(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const latency = 100 * time.Millisecond
	n.SetLatency(latency)
	start := time.Now()
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if took := time.Since(start); took < latency {
		t.Errorf("PING with %v latency took %v", latency, took)
	}
	n.Heal()
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Heal: %v", err)
	}
}

func TestBlackHoleStallsUntilHeal(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	if err := cl.Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, n.Addr())
	raw.send(t, "PING")
	if line, err := raw.readLine(5 * time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("raw PING = %q, %v", line, err)
	}

	n.BlackHole()
	if err := cl.Ping(ctxTimeout(t, 300*time.Millisecond)).Err(); !isTimeout(err) {
		t.Errorf("PING on a pooled connection through a black hole: %v; want a timeout", err)
	}
	fresh := n.Client(t)
	if err := fresh.Ping(ctxTimeout(t, 300*time.Millisecond)).Err(); !isTimeout(err) {
		t.Errorf("PING on a new connection through a black hole: %v; want a timeout", err)
	}
	raw.send(t, "PING")
	if line, err := raw.readLine(200 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("raw PING through a black hole = %q, %v; want a timeout", line, err)
	}

	n.Heal()
	// The held request goes through on the connection that was open.
	if line, err := raw.readLine(5 * time.Second); err != nil || line != "+PONG\r\n" {
		t.Errorf("held raw PING after Heal = %q, %v; want +PONG", line, err)
	}
	if err := cl.Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Errorf("PING after Heal: %v", err)
	}
	if err := fresh.Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Errorf("PING on the second client after Heal: %v", err)
	}
}

func TestRefuseFailsFastUntilHeal(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	cl := n.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, n.Addr())
	raw.send(t, "PING")
	if line, err := raw.readLine(5 * time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("raw PING = %q, %v", line, err)
	}

	n.Refuse()
	if line, err := raw.readLine(failFast); err == nil || isTimeout(err) {
		t.Errorf("open connection after Refuse read %q, %v; want it closed", line, err)
	}
	for range 3 {
		start := time.Now()
		err := cl.Ping(ctx).Err()
		if err == nil || isTimeout(err) || time.Since(start) > failFast {
			t.Fatalf("PING through a refusing proxy: %v after %v; want a fast non-timeout error", err, time.Since(start))
		}
	}
	if !n.Running() {
		t.Error("Refuse stopped the server")
	}

	n.Heal()
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Heal: %v", err)
	}
}

func TestCleanupKillsEverything(t *testing.T) {
	var pids []int
	var addrs []string
	t.Run("cluster", func(t *testing.T) {
		c := StartCluster(t, 2)
		if err := c.Nodes[1].Stop(); err != nil { // cleanup must kill paused servers too
			t.Fatal(err)
		}
		c.Nodes[0].BlackHole() // and not hang on held connections
		dialRaw(t, c.Nodes[0].Addr()).send(t, "PING")
		for _, n := range c.Nodes {
			pids = append(pids, n.PID())
			addrs = append(addrs, n.Addr(), n.ServerAddr())
		}
	})
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("redis-server %d still exists after cleanup", pid)
		}
	}
	for _, addr := range addrs {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("%s still accepts connections after cleanup", addr)
		}
	}
}

func TestNodeMethodsOnADownNode(t *testing.T) {
	t.Parallel()
	n := StartNode(t)
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stop on a killed node: %v; want ErrNotRunning", err)
	}
	if err := n.Cont(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Cont on a killed node: %v; want ErrNotRunning", err)
	}
}
