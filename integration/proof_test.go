package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/internal/redistest"
)

// The proofs: multi-process runs on real redis-server nodes whose histories
// internal/checker verifies, with and without faults, and a paused holder
// stopped by a fenced store. The negative controls, showing that the checker
// fails when an assumption is broken, are in proof_control_test.go. Each
// records a row of docs/guide/RELIABILITY.md (see report_test.go).

// proofTTL is the lock TTL of the contention proofs: the largest TTL in use,
// which a node restarted without data must wait out.
const proofTTL = time.Second

// proofNodeTimeout is the node timeout of the contention proofs: three times
// the default, so that a loaded CI machine does not turn healthy nodes into
// failing ones (a fenced section needs 4 of 5 nodes to answer in time).
const proofNodeTimeout = 150 * time.Millisecond

// proofContention is the workload of the contention proofs: 4 processes, each
// with 2 goroutines on 3 hot resources (short sections) and one on a slow
// resource whose sections outlast a third of the TTL, so keep-alive extends
// them while faults hit.
func proofContention(d time.Duration, faults ...faultStep) proofLoad {
	return proofLoad{
		Processes: 4, Goroutines: 2,
		Resources: []string{"sku-1", "sku-2", "sku-3"},
		Hold:      [2]time.Duration{0, 2 * time.Millisecond},
		Slow:      "ledger",
		SlowHold:  [2]time.Duration{400 * time.Millisecond, 700 * time.Millisecond},
		TTL:       proofTTL, NodeTimeout: proofNodeTimeout, KeepAlive: true, Fencing: true,
		Duration: d, MaxOps: 20000,
		Faults: faults,
	}
}

const proofScenario = "contention: 4 processes × 3 goroutines, 4 resources, 5 nodes"

// checkProof fails the test unless the run was safe and did real work, and
// records its row; note is added to the row's notes.
func checkProof(t *testing.T, fault, note string, out runOutcome) {
	t.Helper()
	checkProofScenario(t, proofScenario, fault, note, out)
}

// checkProofScenario is checkProof for a row of another scenario.
func checkProofScenario(t *testing.T, scenario, fault, note string, out runOutcome) {
	t.Helper()
	r := out.Result
	notes := proofNotes(out)
	if note != "" {
		notes += "; " + note
	}
	report.Add(Row{
		Scenario:   scenario,
		Fault:      fault,
		Ops:        r.Writes,
		Violations: r.Safety(),
		Lost:       r.Lost,
		Duplicated: r.Duplicated,
		Recovery:   out.Recovery,
		Notes:      notes,
	})
	if !r.OK() {
		t.Fatalf("checker: %s; first violation: %s; evidence in %s", r, r.Violations[0].Detail, out.Evidence)
	}
	perRes := map[string]int{}
	for _, s := range out.History.Sections {
		if !s.Aborted() {
			perRes[s.Resource]++
		}
	}
	for _, res := range []string{"sku-1", "sku-2", "sku-3"} {
		if perRes[res] < 10 { // a loaded CI machine runs few; the point is that some ran
			t.Fatalf("only %d sections on %s: the run did not exercise the lock (%v)", perRes[res], res, perRes)
		}
	}
	if perRes["ledger"] < 2 || out.Stats.Extensions == 0 {
		t.Fatalf("%d slow sections, %d extensions: keep-alive was not exercised", perRes["ledger"], out.Stats.Extensions)
	}
}

// proofNotes describes a contention run for its report row.
func proofNotes(out runOutcome) string {
	s := fmt.Sprintf("%d sections on %d resources; %d keep-alive extensions (%d failed); %d locks lost (section abandoned, nothing written); worst stall of a hot resource %v",
		out.Result.Sections, out.Result.Resources, out.Stats.Extensions, out.Stats.FailedExtensions,
		out.Stats.LostLocks, roundDuration(out.Stall))
	if len(out.History.Events) > 0 {
		s += " before the fault, " + roundDuration(out.Recovery).String() + " after"
	}
	if out.Stats.AcquireErrors > 0 {
		s += fmt.Sprintf("; %d acquisitions failed (%s)", out.Stats.AcquireErrors, out.Stats.FirstError)
	}
	return s
}

// TestProofMultiProcessContention: worker processes contend through 5 nodes
// for 3s; no two critical sections on a resource overlap and no update of
// the registers is lost.
func TestProofMultiProcessContention(t *testing.T) {
	env := startProofEnv(t)
	out := runContention(t, env, proofContention(3*time.Second))
	checkProof(t, "none", "", out)
}

// TestProofUnderFaults: the same workload with one fault injected while it
// runs (about 4s each). Every fault leaves a majority of nodes able to
// answer, so locking goes on, and safety must hold throughout.
func TestProofUnderFaults(t *testing.T) {
	heal := func(nodes ...int) func(c *redistest.Cluster) error {
		return func(c *redistest.Cluster) error {
			for _, n := range nodes {
				c.Nodes[n].Heal()
			}
			return nil
		}
	}
	restartAfter := time.Second + proofTTL + 250*time.Millisecond
	tests := []struct {
		name, fault, note string
		steps             []faultStep
	}{
		{
			name: "kill", fault: "node 5 SIGKILLed at +1s, stays down",
			steps: []faultStep{{At: time.Second, What: "SIGKILL node 5", Do: func(c *redistest.Cluster) error { return c.Nodes[4].Kill() }}},
		},
		{
			name: "sigstop", fault: "node 4 SIGSTOPped at +1s, SIGCONT at +2.5s",
			steps: []faultStep{
				{At: time.Second, What: "SIGSTOP node 4", Do: func(c *redistest.Cluster) error { return c.Nodes[3].Stop() }},
				{At: 2500 * time.Millisecond, What: "SIGCONT node 4", Do: func(c *redistest.Cluster) error { return c.Nodes[3].Cont() }},
			},
		},
		{
			name: "partition", fault: "nodes 1-2 black-holed (minority partition) at +1s, healed at +2.5s",
			note: "every section here is fenced, and a fence needs 4 of 5 nodes (assumption 5): " +
				"with 2 black-holed no fence is issued, so the hot resources wait out the partition (unfenced locks would not)",
			steps: []faultStep{
				{At: time.Second, What: "black hole nodes 1,2", Do: func(c *redistest.Cluster) error {
					c.Nodes[0].BlackHole()
					c.Nodes[1].BlackHole()
					return nil
				}},
				{At: 2500 * time.Millisecond, What: "heal nodes 1,2", Do: heal(0, 1)},
			},
		},
		{
			name: "latency", fault: "60ms latency each way on node 3 from +1s to +3s",
			note: "the proxy delays each chunk it forwards, so a round trip to node 3 takes 120-240ms: " +
				"often past the 150ms node timeout, which makes node 3 a slow node at the edge of failing",
			steps: []faultStep{
				{At: time.Second, What: "latency 60ms node 3", Do: func(c *redistest.Cluster) error { c.Nodes[2].SetLatency(60 * time.Millisecond); return nil }},
				{At: 3 * time.Second, What: "no latency node 3", Do: heal(2)},
			},
		},
		{
			name: "restart", fault: fmt.Sprintf("node 1 crashed at +1s, restarted without data at +%v (after the TTL: delayed-restart rule)", restartAfter),
			steps: []faultStep{
				{At: time.Second, What: "SIGKILL node 1", Do: func(c *redistest.Cluster) error { return c.Nodes[0].Kill() }},
				{At: restartAfter, What: "node 1 back, empty", Do: func(c *redistest.Cluster) error { return c.Nodes[0].Restart(0) }},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startProofEnv(t)
			out := runContention(t, env, proofContention(4*time.Second, tt.steps...))
			checkProof(t, tt.fault, tt.note, out)
		})
	}
}

// TestProofPausedHolderFenced: a holder process is SIGSTOPped while it holds
// a fenced lock, past its validity. Another process takes the lock and
// updates the register through the fenced store. When the first is resumed
// it writes at once with its old fence, as a holder paused between its last
// look at the lock and its write would: the store rejects the write, nothing
// is lost, and the resumed holder's keep-alive context ends with
// ErrLockLost.
func TestProofPausedHolderFenced(t *testing.T) {
	if pauseProcess(nil) == errors.ErrUnsupported {
		t.Skip("pausing a process needs Unix signals")
	}
	env := startProofEnv(t)
	const res = "ledger"
	cfg1 := env.config(t, "p1", modeHold)
	cfg1.Resources = []string{res}
	cfg2 := env.config(t, "p2", modeWrite)
	cfg2.Resources = []string{res}
	p1, p2 := startWorker(t, cfg1), startWorker(t, cfg2)

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p1.send("go"))
	holding, err := p1.next("holding", 10*time.Second)
	must(err)
	must(pauseProcess(p1.cmd.Process))
	stopped := stamp()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = resumeProcess(p1.cmd.Process)
		}
	})

	must(p2.send("go"))
	wrote, err := p2.next("wrote", 10*time.Second)
	must(err)
	if !wrote.OK || wrote.Fence <= holding.Fence {
		t.Fatalf("second holder's write: accepted %v with fence %d after %d", wrote.OK, wrote.Fence, holding.Fence)
	}

	must(p1.send("go")) // waits in the pipe until the process runs again
	must(resumeProcess(p1.cmd.Process))
	resumed = true
	resumedAt := stamp()
	stale, err := p1.next("stale", 10*time.Second)
	must(err)
	ka, err := p1.next("keepalive", 10*time.Second)
	must(err)
	o1, err := p1.wait(10 * time.Second)
	must(err)
	o2, err := p2.wait(10 * time.Second)
	must(err)

	final, err := env.client.Get(context.Background(), env.register(res)).Result()
	must(err)
	h := checker.History{
		Sections: append(o1.Sections, o2.Sections...),
		Final:    map[string]string{res: final},
		Events:   []checker.Event{{At: stopped, What: "SIGSTOP p1"}, {At: resumedAt, What: "SIGCONT p1"}},
	}
	r := checker.Check(h)
	staleAccepted := 0
	if stale.OK {
		staleAccepted = 1
	}
	report.Add(Row{
		Scenario:   "fenced store: 2 processes, 1 resource, 5 nodes",
		Fault:      fmt.Sprintf("holder SIGSTOPped for %v (ttl %v)", time.Duration(resumedAt-stopped).Round(time.Millisecond), cfg1.TTL),
		Ops:        3,
		Violations: staleAccepted + r.StaleReads + r.FinalMismatches + r.FenceInversions,
		Lost:       r.Lost,
		Duplicated: r.Duplicated,
		Recovery:   time.Duration(wrote.At - stopped),
		Notes: fmt.Sprintf("3 fenced writes: p1 (fence %d) accepted, p2 (fence %d) accepted, p1's write after resuming rejected=%v; "+
			"p2 began %v after p1's validity ended; p1's keep-alive cancelled with %q; the pause itself shows as %d overlap of the sections, "+
			"harmless here because the store checks fences (assumption 3)",
			holding.Fence, wrote.Fence, !stale.OK, time.Duration(wrote.At-ka.Until).Round(time.Millisecond), ka.Err, r.Overlaps),
	})

	if stale.OK {
		t.Fatalf("the store accepted the paused holder's stale write (fence %d < %d)", holding.Fence, wrote.Fence)
	}
	if final != wrote.Value {
		t.Fatalf("register holds %q, want the second holder's %q", final, wrote.Value)
	}
	if !ka.OK {
		t.Fatalf("resumed holder's keep-alive context: cause %q, want ErrLockLost", ka.Err)
	}
	if wrote.At <= ka.Until {
		t.Fatalf("second holder began %v before the first holder's validity ended", time.Duration(ka.Until-wrote.At))
	}
	// The checker sees the pause as an overlap (mutual exclusion did break:
	// that is what a pause past the validity does) and nothing else: no
	// stale read, no lost update, fences in order.
	if r.Overlaps != 1 || r.Safety() != r.Overlaps || r.Lost != 0 || r.Duplicated != 0 {
		t.Fatalf("checker: %s, want exactly the overlap of the pause", r)
	}
	t.Logf("stale write rejected; %s; p2 acquired %v after the SIGSTOP", r, time.Duration(wrote.At-stopped).Round(time.Millisecond))
}
