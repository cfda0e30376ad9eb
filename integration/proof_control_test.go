package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// TestProofCheckerDetectsViolations: negative controls. Runs that break a
// documented assumption must be reported as unsafe by the same checker, so
// that its silence in the proofs (proof_test.go) means something.
func TestProofCheckerDetectsViolations(t *testing.T) {
	t.Run("short-ttl", func(t *testing.T) {
		// Sections of 300ms under locks of 100ms without keep-alive: the
		// holder outlives its validity (assumption 3) and the next process
		// takes the lock in the middle of the section.
		env := startProofEnv(t)
		out := runContention(t, env, proofLoad{
			Processes: 3, Goroutines: 1,
			Resources: []string{"r"},
			Hold:      [2]time.Duration{300 * time.Millisecond, 300 * time.Millisecond},
			TTL:       100 * time.Millisecond,
			Duration:  1500 * time.Millisecond, MaxOps: 20,
			WantViolations: true,
		})
		r := out.Result
		report.Add(Row{
			Scenario: "control: 3 processes, 1 resource, ttl 100ms, 300ms sections, no keep-alive",
			Fault:    "none (the holders outlive their validity)",
			Ops:      r.Writes, Violations: r.Safety(), Lost: r.Lost, Duplicated: r.Duplicated,
			Control: true,
			Notes:   fmt.Sprintf("%s; releases reporting the loss: %d", r, out.Stats.ReleaseErrors),
		})
		if r.Overlaps == 0 || r.Lost == 0 {
			t.Fatalf("checker missed the violations of locks shorter than their sections: %s; evidence in %s", r, out.Evidence)
		}
		t.Logf("detected: %s", r)
	})

	t.Run("restart-without-delay", func(t *testing.T) {
		env := startProofEnv(t)
		h, notes := restartWithoutDelay(t, env)
		r := checker.Check(h)
		report.Add(Row{
			Scenario: "control: 2 clients, holder's majority includes a node restarted without data",
			Fault:    "node restarted empty at once (breaks the delayed-restart rule)",
			Ops:      r.Writes, Violations: r.Safety(), Lost: r.Lost, Duplicated: r.Duplicated,
			Control: true,
			Notes:   fmt.Sprintf("%s; %s", r, notes),
		})
		if r.Overlaps == 0 || r.Lost == 0 {
			t.Fatalf("checker missed the violation of the delayed-restart rule: %s; evidence in %s", r, keepEvidence(t, h, r))
		}
		t.Logf("detected: %s", r)
	})
}

// restartWithoutDelay builds, step by step, the failure the delayed-restart
// rule prevents: A holds a lock on exactly nodes 1-3 (4 and 5 refuse
// connections while it acquires); node 1 restarts empty at once; B then gets
// a majority from nodes 1, 4 and 5 while A still holds 2 and 3. Both do a
// read-modify-write of the register, recorded as sections.
func restartWithoutDelay(t *testing.T, env *proofEnv) (checker.History, string) {
	t.Helper()
	const res, ttl = "r", 10 * time.Second
	ctx := context.Background()
	c := env.cluster
	// Not a timing test: generous node timeouts (the TTL is 10s).
	a := lockClient(t, c, redlock.WithNodeTimeout(time.Second))
	b := lockClient(t, c, redlock.WithNodeTimeout(time.Second))
	reg := env.register(res)
	get := func() string {
		v, err := env.client.Get(ctx, reg).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	set := func(v string) {
		if err := env.client.Set(ctx, reg, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var h checker.History
	event := func(what string) { h.Events = append(h.Events, checker.Event{At: stamp(), What: what}) }

	c.Nodes[3].Refuse()
	c.Nodes[4].Refuse()
	la, err := a.TryAcquire(ctx, res, ttl)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	secA := checker.Section{Resource: res, Holder: "A", Start: stamp(), Read: get()}
	c.Nodes[3].Heal()
	c.Nodes[4].Heal()
	if err := c.Nodes[0].Restart(0); err != nil {
		t.Fatal(err)
	}
	event("node 1 restarted without data, at once")

	lb, err := b.Acquire(within(t, 5*time.Second), res, ttl)
	if err != nil {
		t.Fatalf("B could not take the lock the restart freed: %v", err)
	}
	secB := checker.Section{Resource: res, Holder: "B", Start: stamp(), Read: get()}
	set("B/1")
	secB.Wrote, secB.End = "B/1", stamp()
	if err := lb.Release(ctx); err != nil {
		t.Errorf("B release: %v", err)
	}
	set("A/1")
	secA.Wrote, secA.End = "A/1", stamp()
	aerr := la.Release(ctx)
	h.Sections = []checker.Section{secA, secB}
	h.Final = map[string]string{res: get()}
	return h, fmt.Sprintf("A held nodes 1-3, B got nodes 1,4,5 while A still believed it held the lock (A's release: %v)", aerr)
}
