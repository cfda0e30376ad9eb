package redistest

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's dial to its backend server.
	proxyDialTimeout = time.Second
	// proxyBufSize is the size of the chunks the proxy forwards.
	proxyBufSize = 32 << 10
	// acceptBackoff is the pause after a failed Accept (e.g. out of file
	// descriptors) before the next one.
	acceptBackoff = 10 * time.Millisecond
)

// mode is how the proxy treats traffic.
type mode int

const (
	// modeForward forwards traffic, after the configured latency.
	modeForward mode = iota
	// modeBlackHole accepts connections but forwards nothing: data is held
	// until the mode changes.
	modeBlackHole
	// modeRefuse resets every connection, open or new.
	modeRefuse
)

// proxy is an in-process TCP proxy from a loopback listener to one backend
// address, whose fault mode can be switched at any time.
type proxy struct {
	ln      net.Listener
	backend string
	ctx     context.Context // canceled by close; bounds backend dials
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the accept loop and every connection handler

	mu      sync.Mutex
	mode    mode
	latency time.Duration
	changed chan struct{} // closed and replaced on every state change
	conns   map[*proxyConn]struct{}
	closed  bool
}

// newProxy starts a proxy to backend on a free loopback port.
func newProxy(backend string) (*proxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{
		ln:      ln,
		backend: backend,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// addr returns the address clients connect to.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// setLatency delays every chunk forwarded from now on by d.
func (p *proxy) setLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
	p.notifyLocked()
}

// blackHole stops all forwarding, on open and new connections, until heal.
func (p *proxy) blackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modeBlackHole
	p.notifyLocked()
}

// refuse resets every open connection and every new one until heal.
func (p *proxy) refuse() {
	p.mu.Lock()
	p.mode = modeRefuse
	p.notifyLocked()
	conns := p.snapshotLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// heal restores plain forwarding with no latency.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modeForward
	p.latency = 0
	p.notifyLocked()
}

// close stops the proxy, closes every connection and waits for all of its
// goroutines. It is safe to call more than once.
func (p *proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.notifyLocked()
	conns := p.snapshotLocked()
	p.mu.Unlock()

	p.cancel()
	_ = p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
}

// notifyLocked wakes every goroutine waiting for a state change.
func (p *proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// snapshotLocked returns the open connections.
func (p *proxy) snapshotLocked() []*proxyConn {
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// serve accepts connections until the proxy is closed.
func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(acceptBackoff):
				continue
			}
		}
		c := newProxyConn(nc)
		if p.track(c) {
			go p.handle(c)
		}
	}
}

// track registers c and accounts for its handler. It resets c and returns
// false when the proxy is refusing connections or closed.
func (p *proxy) track(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == modeRefuse {
		c.reset()
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

// untrack forgets c.
func (p *proxy) untrack(c *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// handle connects c to the backend and forwards in both directions until
// either side closes or the proxy drops the connection.
func (p *proxy) handle(c *proxyConn) {
	defer p.wg.Done()
	defer p.untrack(c)
	defer c.close()

	// A black-holed proxy holds new connections without dialing: the client
	// sees a connection that never answers.
	if !p.admit(c.done, false) {
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	backend, err := d.DialContext(p.ctx, "tcp", p.backend)
	if err != nil {
		return // backend down: the client sees its connection closed
	}
	if !c.setBackend(backend) {
		return
	}

	up := make(chan struct{})
	go func() {
		defer close(up)
		p.pipe(c, backend, c.client)
		c.close()
	}()
	p.pipe(c, c.client, backend)
	c.close()
	<-up
}

// pipe copies src to dst chunk by chunk, passing each chunk through admit,
// until an error or until admit drops the connection.
func (p *proxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, proxyBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.admit(c.done, true) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// admit blocks until a chunk (or, with withLatency false, a new connection)
// may go through: it sleeps the configured latency and waits out a black
// hole. It returns false when the connection must be dropped: the proxy is
// closed or refusing, or done was closed.
func (p *proxy) admit(done <-chan struct{}, withLatency bool) bool {
	delayed := !withLatency
	for {
		p.mu.Lock()
		closed, m, latency, changed := p.closed, p.mode, p.latency, p.changed
		p.mu.Unlock()
		switch {
		case closed || m == modeRefuse:
			return false
		case m == modeBlackHole:
			select {
			case <-changed:
				continue
			case <-done:
				return false
			}
		case !delayed && latency > 0:
			// Sleep, then look at the mode again: a black hole may have
			// started meanwhile.
			delayed = true
			t := time.NewTimer(latency)
			select {
			case <-t.C:
				continue
			case <-done:
				t.Stop()
				return false
			}
		default:
			return true
		}
	}
}

// proxyConn is one client connection and, once dialed, its backend
// connection.
type proxyConn struct {
	client net.Conn
	done   chan struct{} // closed by close
	once   sync.Once

	mu      sync.Mutex
	backend net.Conn
}

// newProxyConn wraps an accepted client connection.
func newProxyConn(client net.Conn) *proxyConn {
	return &proxyConn{client: client, done: make(chan struct{})}
}

// setBackend attaches the backend connection. If c is already closed it
// closes backend and returns false.
func (c *proxyConn) setBackend(backend net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		_ = backend.Close()
		return false
	default:
		c.backend = backend
		return true
	}
}

// reset closes c so that the client sees a connection reset rather than an
// orderly end of stream.
func (c *proxyConn) reset() {
	if tc, ok := c.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.close()
}

// close closes both sides of c and wakes anything waiting on it. It is safe
// to call more than once and concurrently.
func (c *proxyConn) close() {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		close(c.done)
		_ = c.client.Close()
		if c.backend != nil {
			_ = c.backend.Close()
		}
	})
}
