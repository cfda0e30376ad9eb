package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quietRedis drops go-redis's internal log lines (failed dials to nodes the
// tests killed on purpose); the tests assert on errors instead.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis, then either runs a proof worker (when the
// test binary was re-executed as one, see proof_worker_test.go, as an
// asynq task worker, see proof_taskworker_test.go, as a once worker, see
// once_proc_test.go, or as a limit worker, see limit_process_test.go) or runs
// the tests (more of them at once than go test's default: see raiseParallel)
// and, when ASYNQLOCK_RELIABILITY_REPORT names a file, writes the
// reliability report from the rows they recorded (see report_test.go).
func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	if cfg := os.Getenv(limitWorkerEnv); cfg != "" { // a limit worker process (limit_process_test.go)
		os.Exit(limitWorkerMain(cfg))
	}
	if cfg := os.Getenv(proofWorkerEnv); cfg != "" {
		switch workerMode(cfg) {
		case modeTasks: // an asynq worker process (proof_taskworker_test.go)
			os.Exit(taskWorkerMain(cfg))
		case modeOnce: // an asynq server holding its acknowledgments (once_proc_test.go)
			os.Exit(onceWorkerMain(cfg))
		}
		os.Exit(proofWorkerMain(cfg))
	}
	raiseParallel()
	status := m.Run()
	if path := os.Getenv(reportEnv); path != "" {
		wrote, err := writeReport(path, report.Rows(), status)
		abs, _ := filepath.Abs(path)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "reliability report %s: %v\n", abs, err)
			if status == 0 {
				status = 1
			}
		case wrote:
			fmt.Printf("reliability report written to %s\n", abs)
		default:
			fmt.Printf("reliability report %s not written: no test recorded a row\n", abs)
		}
	}
	os.Exit(status)
}
