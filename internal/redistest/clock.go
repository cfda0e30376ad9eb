package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Node clocks.
//
// Redis expires keys by its wall clock. StartClockCluster runs every node
// under libfaketime (Debian package faketime) with a wall-clock offset the
// test changes at any time with Node.SetClockOffset; the monotonic clock is
// left alone. libfaketime re-reads the offset from a file at every clock
// read, so a step takes effect at once, as a stepped system clock would.
//
// redis-server links jemalloc, whose start-up reads the clock while
// libfaketime is still initialising (allocating), and the two recurse into
// each other. glibc's libc_malloc_debug.so, preloaded first, is a malloc
// shim that needs no compiler: it routes malloc to glibc's allocator, which
// never reads the clock.

// FaketimeEnv names the environment variable that, when set, gives the path
// of libfaketime.so.1 instead of looking it up in the usual places.
const FaketimeEnv = "REDISTEST_FAKETIME"

// fakeClock is one node's libfaketime control file.
type fakeClock struct {
	lib, shim, file string
	mu              sync.Mutex
	offset          time.Duration
}

// env is the process environment that puts a server under the clock; nil
// for a node with a real clock.
func (fc *fakeClock) env() []string {
	if fc == nil {
		return nil
	}
	return []string{
		"LD_PRELOAD=" + fc.shim + " " + fc.lib,
		"FAKETIME_TIMESTAMP_FILE=" + fc.file,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// set writes the offset atomically (libfaketime may read the file at any
// moment).
func (fc *fakeClock) set(d time.Duration) error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	s := strconv.FormatFloat(d.Seconds(), 'f', 6, 64)
	if d >= 0 {
		s = "+" + s
	}
	tmp := fc.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(s+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, fc.file); err != nil {
		return err
	}
	fc.offset = d
	return nil
}

// StartClockCluster is StartCluster with every node's wall clock under the
// test's control (see Node.SetClockOffset), all at offset 0. It skips the
// test loudly when libfaketime is missing, or fails it when CI is "true".
func StartClockCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	bin := RequireServer(tb)
	lib, shim := requireFaketime(tb, lookupFaketime)
	return startCluster(tb, bin, n, func(i int, dir string) (*fakeClock, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		fc := &fakeClock{lib: lib, shim: shim, file: filepath.Join(dir, "faketime")}
		return fc, fc.set(0)
	})
}

// SetClockOffset sets the node's wall clock to the real one plus d, at once
// (a step, as an NTP correction or an operator's date command makes). It
// fails on a node not started by StartClockCluster.
func (n *Node) SetClockOffset(d time.Duration) error {
	if n.clock == nil {
		return errors.New("redistest: node's clock is not controlled (start it with StartClockCluster)")
	}
	return n.clock.set(d)
}

// ClockOffset returns the offset last set by SetClockOffset.
func (n *Node) ClockOffset() time.Duration {
	if n.clock == nil {
		return 0
	}
	n.clock.mu.Lock()
	defer n.clock.mu.Unlock()
	return n.clock.offset
}

// requireFaketime returns libfaketime's and the malloc shim's paths, or
// skips the test loudly (fails it under CI=true) when they are missing.
func requireFaketime(tb testing.TB, lookup func() (string, string, error)) (string, string) {
	tb.Helper()
	lib, shim, err := lookup()
	if err == nil {
		return lib, shim
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: libfaketime is required when CI=true and was not found: %v; "+
			"install it with `apt-get install faketime` (or set %s to libfaketime.so.1)", err, FaketimeEnv)
		return "", ""
	}
	tb.Skipf("redistest: *** NODE CLOCK TESTS SKIPPED ***: libfaketime not found: %v; "+
		"install it with `apt-get install faketime` (or set %s to libfaketime.so.1) to run them", err, FaketimeEnv)
	return "", ""
}

// lookupFaketime finds libfaketime (FaketimeEnv first) and glibc's malloc
// shim.
func lookupFaketime() (lib, shim string, err error) {
	if lib = os.Getenv(FaketimeEnv); lib == "" {
		lib = firstGlob("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1")
	}
	if lib == "" {
		return "", "", errors.New("libfaketime.so.1 is not in /usr/lib/*/faketime")
	}
	if _, err := os.Stat(lib); err != nil {
		return "", "", fmt.Errorf("%s=%q: %w", FaketimeEnv, lib, err)
	}
	shim = firstGlob("/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/libc_malloc_debug.so.0", "/lib64/libc_malloc_debug.so.0")
	if shim == "" {
		return "", "", errors.New("glibc's libc_malloc_debug.so.0 (glibc 2.34 or later) was not found")
	}
	return lib, shim, nil
}

// firstGlob returns the first file matching one of the patterns, in order.
func firstGlob(patterns ...string) string {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}
