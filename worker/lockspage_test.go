package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// requireTool returns the path of the first of names found in PATH.
// Missing, it skips the test loudly, or fails it when CI=true, saying which
// Debian package to install and what for.
func requireTool(t *testing.T, pkg, purpose string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found: install it with `apt-get install %s` to %s", names[0], pkg, purpose)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (required when CI=true)")
	}
	t.Skip("*** TEST SKIPPED ***: " + msg)
	return ""
}

// requireChromium returns the path of a headless-capable Chromium.
func requireChromium(t *testing.T) string {
	t.Helper()
	return requireTool(t, "chromium", "test the /locks page in a browser", "chromium", "chromium-browser", "google-chrome")
}

// chromiumAttempts bounds the runs of one Chromium command: on a loaded
// machine the browser itself sometimes dies by a signal (a crash, not a
// finding about the page); such a run is logged and retried.
const chromiumAttempts = 3

// chromium runs headless Chromium with a throw-away profile on url, with
// the given mode flags (--dump-dom, --screenshot=...), and returns stdout.
func chromium(t *testing.T, bin, url string, mode ...string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, stderr, err := runChromium(t, bin, url, mode)
		if err == nil {
			return out
		}
		var ee *exec.ExitError
		crashed := errors.As(err, &ee) && ee.ExitCode() == -1 // killed by a signal
		if !crashed || attempt == chromiumAttempts {
			t.Fatalf("chromium %v (attempt %d): %v\n%s", mode, attempt, err, stderr)
		}
		t.Logf("chromium %v crashed (attempt %d of %d): %v; retrying", mode, attempt, chromiumAttempts, err)
	}
}

func runChromium(t *testing.T, bin, url string, mode []string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--window-size=1280,900"}, mode...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), stderr.String(), err
}

// parkedStub stands in for the middleware's parking until it reports
// parked tasks itself.
type parkedStub map[string][]string

func (p parkedStub) ParkedTasks(context.Context) (map[string][]string, error) { return p, nil }

// TestLocksPageInABrowser: a worker holding a task's lock serves /locks; a
// real headless Chromium renders it with the resource, the task as holder,
// the nodes' health and the parked tasks, and no password from the node
// URLs. A screenshot is kept as the test's artifact.
func TestLocksPageInABrowser(t *testing.T) {
	bin := requireChromium(t)
	f := newFixture(t)
	const secret = "pa55-w0rd-Secret"
	var urls []string
	for _, n := range f.nodes.Nodes {
		if err := n.Client(t).Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">"+secret, "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "redis://locker:"+secret+"@"+n.Addr())
	}
	f.cfg.RedlockNodes = urls
	// Generous bounds: the lock must stay held however loaded the machine.
	f.cfg.NodeTimeout, f.cfg.LockTTL = time.Second, 30*time.Second
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	w.parked = parkedStub{"task:stock:adjust:sku-7": {"task-b", "task-c"}, "task:stock:adjust:sku-9": {"task-d"}}
	started, done := make(chan string, 1), make(chan struct{})
	defer close(done)
	err = w.Handle("stock:adjust", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}), middleware.ByField("sku"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	if _, err := w.Client().Enqueue(asynq.NewTask("stock:adjust", []byte(`{"sku":"sku-7"}`))); err != nil {
		t.Fatal(err)
	}
	var taskID string
	select {
	case taskID = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("task never started")
	}
	// A cron tick record, and a lock first seen after the task's: the page
	// lists the record apart, and the locks oldest first (not by name).
	tick := time.UnixMilli(1_790_000_000_000)
	if _, err := w.Locks().TryAcquire(redlock.ContextWithHolder(context.Background(), "heartbeat"), fmt.Sprintf("cron:heartbeat:%d", tick.UnixMilli()), time.Minute); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, w, "/locks"); code != 200 {
		t.Fatalf("/locks answered %d", code)
	}
	if _, err := w.Locks().TryAcquire(context.Background(), "report:nightly", time.Minute, redlock.WithFencing()); err != nil {
		t.Fatal(err)
	}
	url := "http://" + w.Addr() + "/locks"
	dom := chromium(t, bin, url, "--dump-dom")
	host, _ := os.Hostname()
	replica := fmt.Sprintf("%s pid %d", host, os.Getpid())
	locksTable, _, _ := strings.Cut(dom, `id="ticks"`)
	if i, j := strings.Index(locksTable, "task:stock:adjust:sku-7"), strings.Index(locksTable, "report:nightly"); i < 0 || j < i {
		t.Errorf("locks not listed oldest first: sku-7 at %d, report:nightly at %d", i, j)
	}
	if strings.Contains(locksTable, "cron:heartbeat") {
		t.Error("a cron tick record is listed among the held locks")
	}
	for _, want := range []string{
		"<h2>Cron tick records</h2>", "<td><code>heartbeat</code></td><td>" + tick.UTC().Format("2006-01-02 15:04:05.000") + "</td><td>" + replica + "</td>",
		`<td class="num">-</td>`, // the task's lock has no fence
		"≥ ",                     // how long each lock has been held
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	for _, want := range []string{
		"<title>asynqlock: locks on " + host + "</title>",
		"stock:adjust " + taskID + " (" + host + fmt.Sprintf(" pid %d)", os.Getpid()),
		"task:stock:adjust:sku-7", "5/5 (0,1,2,3,4)",
		"<td>2 <code>task-b</code> <code>task-c</code></td>", // parked behind the holder
		"task:stock:adjust:sku-9", "(not held)", "task-d",    // parked for a free resource
		f.nodes.Nodes[3].Addr(), `<td class="up">up</td>`, "7.0",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if strings.Contains(dom, secret) || strings.Contains(dom, "locker:") {
		t.Error("the page shows a node URL's credentials")
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
	shot := filepath.Join(t.ArtifactDir(), "locks.png")
	chromium(t, bin, url, "--screenshot="+shot, "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot of /locks: %s (kept with go test -artifacts)", shot)
}

// TestLocksPageShowsDownNodesAndCanBeTurnedOff: a node that is down is
// shown as such; WORKER_LOCKS_PAGE=false removes the page.
func TestLocksPageShowsDownNodesAndCanBeTurnedOff(t *testing.T) {
	f := newFixture(t)
	if err := f.nodes.Nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	w, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	code, body := get(t, w, "/locks")
	// Parked tasks are read from the broker by default: no error about them.
	if code != 200 || !strings.Contains(body, `<td class="down">down</td>`) || !strings.Contains(body, "No locks held.") ||
		strings.Contains(body, "Parked tasks are not reported") || strings.Contains(body, "parked tasks not read") {
		t.Fatalf("/locks %d:\n%s", code, body)
	}

	vars := goodEnv()
	vars["WORKER_LOCKS_PAGE"] = "false"
	cfg, err := LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LocksPage {
		t.Fatal("WORKER_LOCKS_PAGE=false left the page on")
	}
	f.cfg.LocksPage = false
	off, err := New(f.cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	start(t, off)
	if code, _ := get(t, off, "/locks"); code != 404 {
		t.Fatalf("/locks answered %d with the page off, want 404", code)
	}
	if code, _ := get(t, off, "/healthz"); code != 200 {
		t.Fatal("/healthz gone with the page off")
	}
}
