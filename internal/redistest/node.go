package redistest

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	// portAttempts bounds how many free ports a new node tries, in case
	// another process takes a port between freePort and the server's bind.
	portAttempts = 5
	// restartAttempts and restartBackoff bound how long Restart keeps trying
	// to bind the node's port again.
	restartAttempts = 10
	restartBackoff  = 50 * time.Millisecond
)

// ErrNotRunning is returned by the Node methods that need a live server
// process when there is none.
var ErrNotRunning = errors.New("redistest: node is not running")

// Node is one redis-server process behind its own fault-injecting proxy.
// Its methods are safe for concurrent use.
type Node struct {
	bin   string
	dir   string // parent of one data directory per run
	port  int    // the server's port, the same for every run
	proxy *proxy
	clock *fakeClock // nil unless the node runs under libfaketime
	// durable: every run uses one data directory and an append-only file
	// synced on every write (StartDurableNode), so a restart keeps the data.
	durable bool

	mu     sync.Mutex
	proc   *process // the current run; nil before the first start and after Kill
	paused bool     // proc was sent SIGSTOP and not SIGCONT since
	runs   int      // how many runs were started, to name data directories
}

// StartNode starts a single node, stopped by tb.Cleanup. It skips or fails
// the test as RequireServer does when redis-server is missing.
func StartNode(tb testing.TB) *Node {
	tb.Helper()
	bin := RequireServer(tb)
	n, err := startNode(bin, tb.TempDir(), nil)
	if err != nil {
		tb.Fatalf("redistest: start node: %v", err)
		return nil
	}
	registerCleanup(tb, n)
	return n
}

// StartDurableNode starts a node whose data survives Kill and Restart: an
// append-only file synced on every write (appendfsync always), as a broker
// that must not lose a task is run. Stopped by tb.Cleanup.
func StartDurableNode(tb testing.TB) *Node {
	tb.Helper()
	bin := RequireServer(tb)
	n, err := startNodeWith(bin, tb.TempDir(), nil, true)
	if err != nil {
		tb.Fatalf("redistest: start durable node: %v", err)
		return nil
	}
	registerCleanup(tb, n)
	return n
}

// registerCleanup makes tb's cleanup shut n down.
func registerCleanup(tb testing.TB, n *Node) {
	tb.Cleanup(func() {
		if err := n.shutdown(); err != nil {
			tb.Errorf("redistest: stop node %s: %v", n.Addr(), err)
		}
	})
}

// startNode starts a server on a free port, retrying with another port a few
// times, then puts a proxy in front of it.
func startNode(bin, dir string, clock *fakeClock) (*Node, error) {
	return startNodeWith(bin, dir, clock, false)
}

// startNodeWith is startNode, durable as StartDurableNode's when asked.
func startNodeWith(bin, dir string, clock *fakeClock, durable bool) (*Node, error) {
	n := &Node{bin: bin, dir: dir, clock: clock, durable: durable}
	var errs []error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n.port = port
		n.mu.Lock()
		err = n.startLocked()
		n.mu.Unlock()
		if err == nil {
			break
		}
		errs = append(errs, err)
	}
	if n.proc == nil {
		return nil, fmt.Errorf("no server started in %d attempts: %w", portAttempts, errors.Join(errs...))
	}
	p, err := newProxy(n.ServerAddr())
	if err != nil {
		_ = n.proc.kill()
		return nil, fmt.Errorf("start proxy: %w", err)
	}
	n.proxy = p
	return n, nil
}

// startLocked starts a new run of the server, with a fresh data directory.
func (n *Node) startLocked() error {
	n.runs++
	dir := filepath.Join(n.dir, "run-"+strconv.Itoa(n.runs))
	var extra []string
	if n.durable {
		dir = filepath.Join(n.dir, "data")
		extra = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	p, err := startProcess(n.bin, dir, n.port, n.clock.env(), extra...)
	if err != nil {
		return err
	}
	n.proc, n.paused = p, false
	return nil
}

// Addr returns the proxy's address, "127.0.0.1:port": what clients should
// dial. It does not change when the node restarts.
func (n *Node) Addr() string { return n.proxy.addr() }

// URL returns "redis://" followed by Addr.
func (n *Node) URL() string { return "redis://" + n.Addr() }

// ServerAddr returns the address redis-server itself listens on, bypassing
// the proxy and its faults. It does not change when the node restarts.
func (n *Node) ServerAddr() string {
	return net.JoinHostPort(loopback, strconv.Itoa(n.port))
}

// PID returns the process id of the running server, or 0 when the node is
// down.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// Running reports whether the server process is alive, even if paused by
// Stop.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

// Stopped reports whether the server process is alive and paused by Stop.
func (n *Node) Stopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked() && n.paused
}

// runningLocked reports whether the current run is alive.
func (n *Node) runningLocked() bool {
	return n.proc != nil && !n.proc.exited()
}

// Kill sends SIGKILL to the server and waits until it is reaped. The node
// stays down until Restart; the proxy keeps accepting connections and closes
// them at once. Killing a node that is down does nothing.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.killLocked()
}

// killLocked kills the current run, if any.
func (n *Node) killLocked() error {
	if n.proc == nil {
		return nil
	}
	if err := n.proc.kill(); err != nil {
		return err
	}
	n.proc, n.paused = nil, false
	return nil
}

// Stop pauses the server with SIGSTOP: connections stay open and commands
// hang, as with a frozen machine or a long GC pause, until Cont.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return ErrNotRunning
	}
	if err := pause(n.proc.cmd.Process); err != nil {
		return fmt.Errorf("redistest: SIGSTOP: %w", err)
	}
	n.paused = true
	return nil
}

// Cont resumes a server paused by Stop with SIGCONT. It does nothing to a
// server that is not paused.
func (n *Node) Cont() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return ErrNotRunning
	}
	if err := resume(n.proc.cmd.Process); err != nil {
		return fmt.Errorf("redistest: SIGCONT: %w", err)
	}
	n.paused = false
	return nil
}

// Restart kills the server if it is running, keeps it down for delay, then
// starts it again on the same port with an empty data set: the node comes
// back having forgotten every key, as after a crash without persistence. It
// returns once the server answers PING.
func (n *Node) Restart(delay time.Duration) error {
	n.mu.Lock()
	err := n.killLocked()
	n.mu.Unlock()
	if err != nil {
		return err
	}
	if delay > 0 {
		time.Sleep(delay)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runningLocked() {
		return errors.New("redistest: node was started concurrently with Restart")
	}
	var errs []error
	for attempt := range restartAttempts {
		if attempt > 0 {
			time.Sleep(restartBackoff)
		}
		err := n.startLocked()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("redistest: restart on port %d: %w", n.port, errors.Join(errs...))
}

// SetLatency makes the proxy delay every chunk it forwards, in both
// directions, by d; 0 removes the delay. A request/response round trip
// therefore takes at least 2*d longer.
func (n *Node) SetLatency(d time.Duration) { n.proxy.setLatency(d) }

// BlackHole partitions the node: the proxy keeps accepting connections but
// forwards nothing and answers nothing, on open connections too, so calls
// hang until their timeout. Bytes already in flight are held and delivered
// after Heal.
func (n *Node) BlackHole() { n.proxy.blackHole() }

// Refuse makes the proxy reset every open client connection and every new
// one at once, so calls fail fast, as if the node refused connections.
func (n *Node) Refuse() { n.proxy.refuse() }

// Heal restores normal forwarding with no latency, resuming connections
// held by BlackHole. It does not restart a killed or stopped server.
func (n *Node) Heal() { n.proxy.heal() }

// shutdown closes the proxy and kills the server.
func (n *Node) shutdown() error {
	n.proxy.close()
	return n.Kill()
}
