package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// logRecorder keeps the records logged at Info and above.
type logRecorder struct {
	mu   sync.Mutex
	recs []string // "LEVEL msg key=value ..."
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler           { return r }
func (r *logRecorder) WithGroup(string) slog.Handler                { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, b.String())
	r.mu.Unlock()
	return nil
}

// count returns how many records contain every part.
func (r *logRecorder) count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(rec, p)
		}
		if all {
			n++
		}
	}
	return n
}

// waitFor polls cond every 50ms for at most limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// switchProxy forwards TCP connections to a target that the test can
// change: a lock node URL that starts reaching another server, as after a
// DNS or load-balancer change.
type switchProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.set("")
		p.wg.Wait()
	})
	return p
}

// set changes the target and drops the open connections.
func (p *switchProxy) set(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *switchProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(out, in); _ = out.Close() })
		p.wg.Go(func() { _, _ = io.Copy(in, out); _ = in.Close() })
	}
}

// TestWorkerRefusesToStartOnOneServerTwice: two spellings of one server in
// REDLOCK_NODES make New fail (the lock client compares run IDs on first
// contact), naming both URLs.
func TestWorkerRefusesToStartOnOneServerTwice(t *testing.T) {
	f := newFixture(t)
	_, port, _ := strings.Cut(f.nodes.Nodes[0].Addr(), ":")
	dup := "redis://localhost:" + port
	f.cfg.RedlockNodes[3] = dup
	_, err := New(f.cfg, quiet())
	if !errors.Is(err, redlock.ErrInvalid) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "same run_id") {
		t.Fatalf("New = %v, want ErrInvalid (same run_id) and ErrConfig", err)
	}
	for _, want := range []string{"REDLOCK_NODES", "node 0 (" + f.cfg.RedlockNodes[0] + ")", "node 3 (" + dup + ")"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestWorkerNotReadyWhileTwoNodesAreOneServer: a node URL that starts
// reaching another node's server is found by the periodic check: logged at
// Error naming both, /readyz fails saying so; when it reaches its own server
// again the worker is ready again.
func TestWorkerNotReadyWhileTwoNodesAreOneServer(t *testing.T) {
	f := newFixture(t)
	sp := newSwitchProxy(t, f.nodes.Nodes[4].Addr())
	f.cfg.RedlockNodes[4] = "redis://" + sp.ln.Addr().String()
	rec := &logRecorder{}
	f.cfg.ReadinessInterval, f.cfg.NodeCheckInterval = 100*time.Millisecond, 100*time.Millisecond
	w, err := New(f.cfg, WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	waitStatus(t, w, "/readyz", 200, 10*time.Second)

	sp.set(f.nodes.Nodes[0].Addr())
	waitStatus(t, w, "/readyz", 503, 20*time.Second)
	_, body := get(t, w, "/readyz")
	for _, want := range []string{"two lock nodes are one server", "node 0 (" + f.cfg.RedlockNodes[0] + ")", "node 4 (" + f.cfg.RedlockNodes[4] + ")"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz body %q does not say %q", body, want)
		}
	}
	waitFor(t, "not-ready state", 10*time.Second, func() bool { return !w.ready.Load() })
	if n := rec.count("ERROR lock nodes are not independent", "node 4 ("+f.cfg.RedlockNodes[4]+")"); n != 1 {
		t.Errorf("%d Error records naming the nodes, want 1 (logged once per change)", n)
	}

	sp.set(f.nodes.Nodes[4].Addr())
	waitStatus(t, w, "/readyz", 200, 20*time.Second)
	if rec.count("INFO lock nodes are independent again") != 1 {
		t.Error("the recovery is not logged")
	}
}

// TestWorkerComparesANodeThatComesBack: a node down at start is compared
// as soon as it answers, not at the next periodic check (an hour here): it
// turns out to reach node 0's server, and the worker becomes not ready.
func TestWorkerComparesANodeThatComesBack(t *testing.T) {
	f := newFixture(t)
	sp := newSwitchProxy(t, "127.0.0.1:1") // nothing listens: the node is down
	f.cfg.RedlockNodes[4] = "redis://" + sp.ln.Addr().String()
	f.cfg.ReadinessInterval, f.cfg.NodeCheckInterval = 100*time.Millisecond, time.Hour
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	waitStatus(t, w, "/readyz", 200, 10*time.Second) // 4 of 5 nodes: a quorum
	sp.set(f.nodes.Nodes[0].Addr())
	waitStatus(t, w, "/readyz", 503, 20*time.Second)
	if _, body := get(t, w, "/readyz"); !strings.Contains(body, "node 4 ("+f.cfg.RedlockNodes[4]+")") {
		t.Fatalf("/readyz body %q does not name the node that came back", body)
	}
}

// TestWorkerWarnsAboutNodeSettingsOnce: an evicting node is warned about at
// Warn, naming the node and what to change, once however many checks run;
// fixed and broken again, it is warned about again (the control that the
// count can exceed one). A node restarted without persistence is warned
// about too.
func TestWorkerWarnsAboutNodeSettingsOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	lru := f.nodes.Nodes[2].Client(t)
	setPolicy := func(p string) {
		t.Helper()
		if err := lru.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
			t.Fatal(err)
		}
		if err := lru.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setPolicy("allkeys-lru")
	rec := &logRecorder{}
	f.cfg.NodeCheckInterval = 100 * time.Millisecond
	w, err := New(f.cfg, WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	addr := "addr=" + f.nodes.Nodes[2].Addr()
	evicts := []string{"WARN lock node setting breaks a Redlock assumption", addr, "maxmemory-policy allkeys-lru", "set maxmemory-policy noeviction"}
	waitFor(t, "eviction warning", 10*time.Second, func() bool { return rec.count(evicts...) > 0 })
	_, at0, _ := w.nodes.snapshot()
	waitFor(t, "several more checks", 10*time.Second, func() bool {
		_, at, _ := w.nodes.snapshot()
		return at.Sub(at0) > 300*time.Millisecond
	})
	if n := rec.count(evicts...); n != 1 {
		t.Fatalf("eviction warned %d times over several checks, want once", n)
	}
	setPolicy("noeviction")
	waitFor(t, "a check after the fix", 10*time.Second, func() bool {
		r, _, _ := w.nodes.snapshot()
		return len(r) == 5 && r[2].MaxmemoryPolicy == "noeviction"
	})
	setPolicy("allkeys-lru")
	waitFor(t, "the warning again after breaking it again", 10*time.Second, func() bool { return rec.count(evicts...) == 2 })

	if err := f.nodes.Nodes[3].Restart(0); err != nil {
		t.Fatal(err)
	}
	restarted := []string{"WARN lock node restarted and keeps no data", "addr=" + f.nodes.Nodes[3].Addr(), "ttl=2s"}
	waitFor(t, "restart warning", 10*time.Second, func() bool { return rec.count(restarted...) == 1 })
}
