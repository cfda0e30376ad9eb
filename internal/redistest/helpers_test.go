package redistest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// isTimeout reports whether err is a deadline or i/o timeout, as opposed to
// a failure that came back fast.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// ctxTimeout returns a context that expires after d, canceled at cleanup.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rawConn is a plain TCP connection speaking inline commands, to observe
// the proxy below any client library.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// dialRaw connects to addr, closed at cleanup.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// send writes line and a CRLF within a second.
func (c *rawConn) send(t *testing.T, line string) {
	t.Helper()
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line + "\r\n")); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// readLine reads one line, waiting at most d.
func (c *rawConn) readLine(d time.Duration) (string, error) {
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}
