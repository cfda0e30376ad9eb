package bench

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

var pinCPUs = flag.String("bench.pin", "",
	"SERVERS/PROCESS: pin every redis-server of BenchmarkMiddlewareHotMix (lock nodes, broker, store) to the CPU list SERVERS and this process (the workers, the enqueuer) to PROCESS with taskset, e.g. 0/1 (empty: no pinning)")

// pinHotMix pins the redis-servers ns to one CPU list and this process, every
// thread of it, to another (-bench.pin), so that on a 2-core machine the
// workers and the servers do not take CPU from each other: the comparison
// between variants does not depend on who the scheduler favours. A thread
// the Go runtime starts later inherits its creator's affinity. Refused with
// a message naming the flag when taskset is missing or the list is malformed.
func pinHotMix(b *testing.B, ns ...*redistest.Node) {
	b.Helper()
	if *pinCPUs == "" {
		return
	}
	servers, self, ok := strings.Cut(*pinCPUs, "/")
	if !ok || servers == "" || self == "" {
		b.Fatalf("-bench.pin=%q: want SERVERS/PROCESS CPU lists, e.g. 0/1", *pinCPUs)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		b.Fatalf("-bench.pin needs taskset (Debian package util-linux): %v", err)
	}
	for _, n := range ns {
		taskset(b, servers, n.PID())
	}
	taskset(b, self, os.Getpid())
}

// taskset sets the CPU affinity of every thread of pid to cpus.
func taskset(b *testing.B, cpus string, pid int) {
	b.Helper()
	if pid <= 0 {
		b.Fatalf("-bench.pin: a redis-server is not running")
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		b.Fatalf("-bench.pin: taskset -a -p -c %s %d: %v: %s", cpus, pid, err, out)
	}
}
