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

var (
	pinCPUs = flag.String("bench.pin", "",
		"SERVERS/PROCESS: pin every redis-server of BenchmarkMiddlewareHotMix (lock nodes, broker, store) to the CPU list SERVERS and this process (the workers, the enqueuer) to PROCESS with taskset, e.g. 0/1 (empty: no pinning)")
	pinLocks = flag.String("bench.pinlocks", "",
		"LOCKS/REST: pin the 5 lock nodes of BenchmarkMiddlewareThroughput and BenchmarkMiddlewareTurns to the CPU list LOCKS, and this process, the broker and the store to REST, with taskset, e.g. 0/1: lock nodes on machines of their own, as Redlock's independent nodes are deployed (empty: no pinning)")
)

// pinApart pins the redis-servers apart to one CPU list and this process,
// every thread of it, with the servers beside, to another, as spec
// ("APART/BESIDE", the value of flag) says, so that on a 2-core machine the
// two sides do not take CPU from each other: a comparison between variants
// does not depend on who the scheduler favours. A thread the Go runtime
// starts later inherits its creator's affinity. An empty spec pins nothing;
// a malformed one, or taskset missing, is refused with a message naming
// the flag.
func pinApart(b *testing.B, flag, spec string, apart, beside []*redistest.Node) {
	b.Helper()
	if spec == "" {
		return
	}
	one, other, ok := strings.Cut(spec, "/")
	if !ok || one == "" || other == "" {
		b.Fatalf("-%s=%q: want two CPU lists, e.g. 0/1", flag, spec)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		b.Fatalf("-%s needs taskset (Debian package util-linux): %v", flag, err)
	}
	for _, n := range apart {
		taskset(b, flag, one, n.PID())
	}
	for _, n := range beside {
		taskset(b, flag, other, n.PID())
	}
	taskset(b, flag, other, os.Getpid())
}

// taskset sets the CPU affinity of every thread of pid to cpus.
func taskset(b *testing.B, flag, cpus string, pid int) {
	b.Helper()
	if pid <= 0 {
		b.Fatalf("-%s: a redis-server is not running", flag)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		b.Fatalf("-%s: taskset -a -p -c %s %d: %v: %s", flag, cpus, pid, err, out)
	}
}
