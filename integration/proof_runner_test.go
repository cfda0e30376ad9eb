package integration

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The parent side of the multi-process proofs: it starts 5 lock nodes and a
// separate store node holding the registers, re-executes the test binary as
// worker processes (see proof_worker_test.go), injects faults on a schedule
// while they run, collects their histories and has internal/checker verify
// them.

// proofEnv is the servers of one proof run.
type proofEnv struct {
	cluster *redistest.Cluster // the lock nodes
	store   *redistest.Node    // the registers, never faulted
	client  *redis.Client      // to the store
	prefix  string             // of this run's registers
}

// startProofEnv starts 5 lock nodes and the store node.
func startProofEnv(t *testing.T) *proofEnv {
	t.Helper()
	env := &proofEnv{cluster: redistest.StartCluster(t, 5), store: redistest.StartNode(t)}
	env.client = env.store.Client(t)
	env.prefix = "proof:" + safeName(t.Name()) + ":"
	return env
}

// register returns the store key of resource's register.
func (e *proofEnv) register(resource string) string { return e.prefix + resource }

// config returns a worker config for this environment.
func (e *proofEnv) config(t *testing.T, id, mode string) workerConfig {
	return workerConfig{
		ID: id, Mode: mode,
		Nodes: e.cluster.URLs(), Store: e.store.ServerAddr(), KeyPrefix: e.prefix,
		NodeTimeout: 50 * time.Millisecond, TTL: time.Second,
		Goroutines: 1, MaxOps: 1,
		Limit: time.Minute,
		Out:   filepath.Join(t.TempDir(), id+".json"),
	}
}

// faultStep is one fault action of a run's schedule.
type faultStep struct {
	At   time.Duration // after the start of the run
	What string        // recorded as an event of the history
	Do   func(c *redistest.Cluster) error
}

// proofLoad describes a multi-process contention run.
type proofLoad struct {
	Processes, Goroutines int
	Resources             []string
	Hold                  [2]time.Duration
	Slow                  string // resource of one long-section goroutine per process, if any
	SlowHold              [2]time.Duration
	TTL                   time.Duration
	NodeTimeout           time.Duration // 0: the workers' default (50ms)
	KeepAlive, Fencing    bool
	Duration              time.Duration
	Phase                 time.Duration    // alternate calm and busy phases (workerConfig.Phase)
	Think                 [2]time.Duration // pause after a section in a calm phase
	MaxOps                int              // per process
	Faults                []faultStep
	// WantViolations marks a negative control: evidence is kept when the
	// checker finds nothing instead of when it finds something.
	WantViolations bool
}

// runOutcome is what a contention run showed.
type runOutcome struct {
	History checker.History
	Result  checker.Result
	Stats   workerStats // summed over workers
	// Recovery is the worst stall of a hot resource from the first fault
	// event to the end of the run: the longest the faults kept work on a
	// resource from proceeding. 0 without faults.
	Recovery time.Duration
	// Stall is the worst stall before the first fault event (the whole run
	// without faults), for comparison.
	Stall    time.Duration
	Evidence string // where the evidence was kept, if it was
}

// runContention runs c on env and checks the resulting history. It fails the
// test if a worker fails or a fault cannot be injected; the checker's verdict
// is left to the caller, with the evidence kept when it is not the expected
// one.
func runContention(t *testing.T, env *proofEnv, c proofLoad) runOutcome {
	t.Helper()
	workers := make([]*workerProc, c.Processes)
	errs := make([]error, c.Processes)
	var wg sync.WaitGroup
	for i := range workers {
		cfg := env.config(t, fmt.Sprintf("p%d", i+1), modeContend)
		cfg.Resources, cfg.Goroutines, cfg.Hold = c.Resources, c.Goroutines, c.Hold
		cfg.Slow, cfg.SlowHold = c.Slow, c.SlowHold
		cfg.TTL, cfg.KeepAlive, cfg.Fencing = c.TTL, c.KeepAlive, c.Fencing
		if c.NodeTimeout > 0 {
			cfg.NodeTimeout = c.NodeTimeout
		}
		cfg.Duration, cfg.MaxOps = c.Duration, c.MaxOps
		cfg.Phase, cfg.Think = c.Phase, c.Think
		// Workers start concurrently: each pays for the binary's start-up.
		wg.Go(func() { workers[i], errs[i] = launchWorker(t, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	start := stamp()
	for _, w := range workers {
		if err := w.send("go"); err != nil {
			t.Fatal(err)
		}
	}
	events := make(chan checker.Event, len(c.Faults))
	faultErr := make(chan error, 1)
	// A test that fails early must not tear the nodes down under a fault
	// step still running: stop the schedule and wait for it on return.
	stopFaults, faultsDone := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stopFaults)
		<-faultsDone
	}()
	go func() {
		defer close(faultsDone)
		defer close(events)
		for _, f := range c.Faults {
			timer := time.NewTimer(time.Duration(start + int64(f.At) - stamp()))
			select {
			case <-stopFaults:
				timer.Stop()
				return
			case <-timer.C:
			}
			if err := f.Do(env.cluster); err != nil {
				faultErr <- fmt.Errorf("%s: %w", f.What, err)
				return
			}
			events <- checker.Event{At: stamp(), What: f.What}
		}
	}()

	var out runOutcome
	limit := c.Duration + 30*time.Second
	for _, w := range workers {
		o, err := w.wait(limit)
		if err != nil {
			t.Fatal(err)
		}
		out.History.Sections = append(out.History.Sections, o.Sections...)
		out.Stats = addStats(out.Stats, o.Stats)
	}
	for e := range events {
		out.History.Events = append(out.History.Events, e)
	}
	select {
	case err := <-faultErr:
		t.Fatalf("fault injection: %v", err)
	default:
	}

	out.History.Final = map[string]string{}
	for _, r := range append(slices.Clone(c.Resources), c.Slow) {
		if r == "" {
			continue
		}
		v, err := env.client.Get(context.Background(), env.register(r)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("read register %s: %v", r, err)
		}
		out.History.Final[r] = v
	}
	out.Result = checker.Check(out.History)
	first, last := int64(math.MaxInt64), int64(0)
	for _, s := range out.History.Sections {
		first, last = min(first, s.Start), max(last, s.End)
	}
	out.Stall = worstStall(out.History, c.Resources, first, last+1)
	if len(out.History.Events) > 0 {
		at := out.History.Events[0].At
		out.Stall = worstStall(out.History, c.Resources, first, at)
		out.Recovery = worstStall(out.History, c.Resources, at, last+1)
	}
	if out.Result.OK() == c.WantViolations || os.Getenv(keepEnv) != "" {
		out.Evidence = keepEvidence(t, out.History, out.Result)
	}
	t.Logf("%s; %d acquire errors, %d lost locks, %d extensions (%d failed), %d node errors; worst stall %v before faults, %v after",
		out.Result, out.Stats.AcquireErrors, out.Stats.LostLocks, out.Stats.Extensions, out.Stats.FailedExtensions,
		out.Stats.NodeErrors, out.Stall, out.Recovery)
	return out
}

func addStats(a, b workerStats) workerStats {
	a.AcquireErrors += b.AcquireErrors
	a.ReleaseErrors += b.ReleaseErrors
	a.LostLocks += b.LostLocks
	a.Extensions += b.Extensions
	a.FailedExtensions += b.FailedExtensions
	a.NodeErrors += b.NodeErrors
	a.FirstRound += b.FirstRound
	a.Retried += b.Retried
	if a.FirstError == "" {
		a.FirstError = b.FirstError
	}
	return a
}

// worstStall is the longest time a resource went without a critical section
// (from the end of one to the start of the next, or from from itself) among
// the sections on resources that began in [from, to).
func worstStall(h checker.History, resources []string, from, to int64) time.Duration {
	var worst time.Duration
	for _, r := range resources {
		var secs []checker.Section
		for _, s := range h.Sections {
			if s.Resource == r {
				secs = append(secs, s)
			}
		}
		slices.SortFunc(secs, func(a, b checker.Section) int { return cmp.Compare(a.Start, b.Start) })
		prevEnd := from
		for _, s := range secs {
			if s.Start >= from && s.Start < to {
				worst = max(worst, time.Duration(s.Start-prevEnd))
			}
			prevEnd = max(prevEnd, s.End)
		}
	}
	return worst
}

// artifactsEnv names the environment variable giving the directory where
// proofs keep their evidence; the default is testdata/artifacts (ignored by
// git). With go test's -artifacts flag, the test's ArtifactDir is used.
const artifactsEnv = "TEST_ARTIFACTS"

// keepEnv names the environment variable that, when set, makes every
// contention run keep its evidence, failed or not.
const keepEnv = "ASYNQLOCK_PROOF_KEEP"

// keepEvidence stores a history and its check where it outlives the test,
// logs where, and returns the directory.
func keepEvidence(t *testing.T, h checker.History, r checker.Result) string {
	t.Helper()
	var dir string
	switch base := os.Getenv(artifactsEnv); {
	case base != "":
		dir = filepath.Join(base, safeName(t.Name())+"-"+time.Now().Format("20060102-150405.000"))
	case artifactsFlag():
		dir = t.ArtifactDir()
	default:
		dir = filepath.Join("testdata", "artifacts", safeName(t.Name())+"-"+time.Now().Format("20060102-150405.000"))
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if _, err := checker.WriteEvidence(dir, h, r); err != nil {
		t.Errorf("keep evidence in %s: %v", dir, err)
		return ""
	}
	t.Logf("evidence kept in %s (%s, %s, %s)", dir, checker.HistoryFile, checker.ViolationsFile, checker.TimelineFile)
	return dir
}

// artifactsFlag reports whether go test's -artifacts flag is set.
func artifactsFlag() bool {
	f := flag.Lookup("test.artifacts")
	return f != nil && f.Value.String() == "true"
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// safeName makes a test name usable as a file name or key part.
func safeName(name string) string { return unsafeName.ReplaceAllString(name, "_") }
