package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
)

// Worker processes, seen from the parent: started from the test binary
// itself, driven through stdin, observed through stdout (see
// proof_worker_test.go for the other side).

// workerProc is a running worker process.
type workerProc struct {
	cfg    workerConfig
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan workerEvent // the worker's stdout, closed at its end
	stderr workertest.Buffer
	done   chan struct{} // closed when the process has been reaped
	err    error         // cmd.Wait's result, once done is closed
}

// startWorker starts a worker process running cfg and waits until it is
// ready (connected to its nodes and store). The process is killed at the end
// of the test if it is still running.
func startWorker(t *testing.T, cfg workerConfig) *workerProc {
	t.Helper()
	w, err := launchWorker(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// launchWorker is startWorker for any goroutine: it reports failures
// instead of failing the test.
func launchWorker(t *testing.T, cfg workerConfig) (*workerProc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	w := &workerProc{cfg: cfg, events: make(chan workerEvent, 64), done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^$")
	w.cmd.Env = append(os.Environ(), proofWorkerEnv+"="+string(raw))
	w.cmd.Stderr = &w.stderr
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", cfg.ID, err)
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		defer close(w.events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e workerEvent
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event == "" {
				continue
			}
			select {
			case w.events <- e:
			default: // nobody listens: never block the worker's exit
			}
		}
	}()
	go func() {
		<-lines // Wait closes stdout: read it all first
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	})
	if _, err := w.next("ready", 30*time.Second); err != nil {
		return nil, err
	}
	return w, nil
}

// send writes one word to the worker's stdin.
func (w *workerProc) send(word string) error {
	_, err := io.WriteString(w.stdin, word+"\n")
	return err
}

// next waits for the worker's next event, which must be name.
func (w *workerProc) next(name string, limit time.Duration) (workerEvent, error) {
	select {
	case e, ok := <-w.events:
		switch {
		case !ok:
			<-w.done
			return e, fmt.Errorf("worker %s ended (%v) before %q: %s", w.cfg.ID, w.err, name, stderrTail(w.stderr.String()))
		case e.Event != name:
			return e, fmt.Errorf("worker %s: event %q, want %q", w.cfg.ID, e.Event, name)
		}
		return e, nil
	case <-time.After(limit):
		return workerEvent{}, fmt.Errorf("worker %s: no %q within %v; stderr: %s", w.cfg.ID, name, limit, stderrTail(w.stderr.String()))
	}
}

// wait waits for the worker to exit and returns its output.
func (w *workerProc) wait(limit time.Duration) (workerOutput, error) {
	select {
	case <-w.done:
	case <-time.After(limit):
		_ = w.cmd.Process.Kill()
		<-w.done
		return workerOutput{}, fmt.Errorf("worker %s still running after %v: killed; stderr: %s", w.cfg.ID, limit, stderrTail(w.stderr.String()))
	}
	if w.err != nil {
		return workerOutput{}, fmt.Errorf("worker %s: %v; stderr: %s", w.cfg.ID, w.err, stderrTail(w.stderr.String()))
	}
	var out workerOutput
	b, err := os.ReadFile(w.cfg.Out)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		return workerOutput{}, fmt.Errorf("worker %s output: %w", w.cfg.ID, err)
	}
	return out, nil
}

// stderrTail returns the end of a worker's stderr, for error messages.
func stderrTail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}
