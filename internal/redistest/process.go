package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// readyTimeout bounds how long a starting server may take to answer PING.
	readyTimeout = 5 * time.Second
	// readyPoll is the pause between two readiness probes.
	readyPoll = 10 * time.Millisecond
	// reapTimeout bounds how long a killed server may take to be reaped.
	reapTimeout = 10 * time.Second
	// logTail is how much of a server's log an error message quotes.
	logTail = 2048
)

// errExited reports a server process that exited while it was starting.
var errExited = errors.New("redis-server exited")

// process is one run of redis-server, reaped by a goroutine.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once cmd.Wait has returned
	waitErr error         // cmd.Wait's result; read only after done is closed
}

// serverArgs returns the command line of a volatile, loopback-only server.
func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", loopback,
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--enable-debug-command", "local",
	}
}

// startProcess starts redis-server on port with dir (created if needed) as
// its working and data directory, and waits until it answers PING. On error
// no process is left behind.
func startProcess(bin, dir string, port int, env []string, extra ...string) (*process, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return launch(bin, dir, port, append(serverArgs(port, dir), extra...), env)
}

// launch starts redis-server with args (and env added to the process's
// environment, when not nil), serving plain TCP on port, as startProcess does.
func launch(bin, dir string, port int, args, env []string) (*process, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()

	addr := net.JoinHostPort(loopback, strconv.Itoa(port))
	if err := p.waitReady(addr, cmd.Process.Pid); err != nil {
		_ = p.kill()
		return nil, fmt.Errorf("redis-server on %s: %w; log: %s", addr, err, p.logTail())
	}
	return p, nil
}

// waitReady polls addr until the server answering there is this process (a
// server of another test may hold the port if this one failed to bind), the
// process exits or readyTimeout passes.
func (p *process) waitReady(addr string, pid int) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		got, err := serverPID(addr, 200*time.Millisecond)
		if err == nil && got != pid {
			err = fmt.Errorf("port answered by another redis-server (pid %d, ours %d)", got, pid)
		}
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%w while starting: %v", errExited, p.waitErr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within %v: %w", readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(readyPoll):
		}
	}
}

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGCONT (a paused process must be able to die) then SIGKILL,
// and waits until the process is reaped. It is a no-op on an exited process.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	_ = resume(p.cmd.Process)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill redis-server (pid %d): %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(reapTimeout):
		return fmt.Errorf("redis-server (pid %d) not reaped %v after SIGKILL", p.cmd.Process.Pid, reapTimeout)
	}
}

// logTail returns the end of the server's log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "(empty)"
}

// serverPID asks the server at addr for its process id (INFO server) over a
// fresh connection, all within timeout.
func serverPID(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := conn.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	size, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}
