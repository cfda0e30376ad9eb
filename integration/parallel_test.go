package integration

import (
	"flag"
	"strconv"
)

// parallelTests is how many tests of this package run at once when
// -test.parallel is not given. go test's default is GOMAXPROCS (2 on a
// 2-core CI machine), but the parallel tests here mostly wait: for asynq's
// 30s leases and its recoverer (about a minute each, see
// TestProofWorkerCrash), for cron ticks, for a Redis Cluster failover. Run
// two at a time, those waits add up to minutes of an idle machine. Tests
// that measure timing or ratios, or touch process-wide state, stay serial
// and run before all of these, alone in this package.
const parallelTests = 4

// raiseParallel sets -test.parallel to parallelTests unless the command
// line set it. It parses the flags, as TestMain must before reading them.
func raiseParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
}
