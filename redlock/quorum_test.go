package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// nodeBehaviour is what one node does with an acquire.
type nodeBehaviour int

const (
	bOK      nodeBehaviour = iota // grants
	bTaken                        // another holder has the key
	bError                        // answers an error at once
	bTimeout                      // never answers within the node timeout
	nBehaviours
)

func (b nodeBehaviour) String() string {
	return [...]string{"ok", "taken", "error", "timeout"}[b]
}

// expected is the rule stated plainly, over the full picture of a round:
// granted with a quorum of OKs; otherwise the error matches ErrQuorum when a
// majority failed (error or timeout) and ErrLocked when a majority was held
// by another; it never matches ErrLocked if no node was held by another, and
// never ErrQuorum if no node failed. early tells whether the answers that
// come at once (everything but timeouts) decide the round.
type expected struct {
	granted          bool
	mustQuorum       bool
	mustLocked       bool
	neverQuorum      bool
	neverLocked      bool
	early            bool
	ok, refused, bad int
}

func expectedOutcome(bs []nodeBehaviour) expected {
	n, q := len(bs), quorum(len(bs))
	var e expected
	errs := 0
	for _, b := range bs {
		switch b {
		case bOK:
			e.ok++
		case bTaken:
			e.refused++
		case bError:
			errs++
			e.bad++
		case bTimeout:
			e.bad++
		}
	}
	e.granted = e.ok >= q
	e.early = e.granted || n-e.refused-errs < q
	e.mustQuorum = !e.granted && n-e.bad < q
	e.mustLocked = !e.granted && n-e.refused < q
	e.neverQuorum = e.bad == 0
	e.neverLocked = e.refused == 0
	return e
}

// check asserts err against the expectation.
func (e expected) check(t *testing.T, err error) {
	t.Helper()
	if e.granted {
		if err != nil {
			t.Fatalf("want granted, got %v", err)
		}
		return
	}
	if err == nil {
		t.Fatal("granted without a quorum")
	}
	isQ, isL := errors.Is(err, ErrQuorum), errors.Is(err, ErrLocked)
	switch {
	case !isQ && !isL:
		t.Fatalf("error matches neither ErrQuorum nor ErrLocked: %v", err)
	case e.mustQuorum && !isQ:
		t.Fatalf("a majority failed but the error does not match ErrQuorum: %v", err)
	case e.mustLocked && !isL:
		t.Fatalf("a majority was held but the error does not match ErrLocked: %v", err)
	case e.neverQuorum && isQ:
		t.Fatalf("no node failed but the error matches ErrQuorum: %v", err)
	case e.neverLocked && isL:
		t.Fatalf("no node was held but the error matches ErrLocked: %v", err)
	}
}

// combos enumerates every assignment of the four behaviours to n nodes.
func combos(n int) [][]nodeBehaviour {
	total := 1
	for range n {
		total *= int(nBehaviours)
	}
	out := make([][]nodeBehaviour, 0, total)
	for x := range total {
		bs := make([]nodeBehaviour, n)
		for i := range bs {
			bs[i] = nodeBehaviour(x % int(nBehaviours))
			x /= int(nBehaviours)
		}
		out = append(out, bs)
	}
	return out
}

// TestTallyDecidesEveryOrder feeds every outcome combination of 5 nodes to
// the tally in several orders: the decision taken at the first decided
// moment must equal the final one, whatever the order of the answers.
func TestTallyDecidesEveryOrder(t *testing.T) {
	all := combos(5)
	if len(all) != 1024 {
		t.Fatalf("got %d combinations, want 4^5", len(all))
	}
	toOutcome := map[nodeBehaviour]outcome{bOK: outOK, bTaken: outRefused, bError: outFailed, bTimeout: outFailed}
	// Any order of answers may happen; the decision must hold in each.
	orders := [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 3, 0, 4, 2}}
	for _, bs := range all {
		want := expectedOutcome(bs)
		for _, order := range orders {
			tl := tally{total: 5, need: 3}
			for _, i := range order {
				tl.add(toOutcome[bs[i]])
				if tl.decided() {
					break
				}
			}
			if !tl.decided() {
				t.Fatalf("%v: undecided after all answers", bs)
			}
			var err error
			if !tl.success() {
				err = &opError{kinds: tl.causes()}
			}
			t.Run(fmt.Sprint(bs, order), func(t *testing.T) { want.check(t, err) })
		}
	}
}

// TestAttemptEveryNodeOutcome runs a real attempt against five in-memory
// nodes for all 1024 combinations of ok / taken / error / timeout, on virtual
// time: it checks the outcome, that the answer comes as soon as it is decided
// (a timing-out node costs nothing once the outcome is known), and that a
// failed attempt leaves no key of its own behind.
func TestAttemptEveryNodeOutcome(t *testing.T) {
	const nodeTimeout = 50 * time.Millisecond
	for _, bs := range combos(5) {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, mems := memClient(t, 5, WithNodeTimeout(nodeTimeout))
				k := c.keysFor("res")
				for i, b := range bs {
					switch b {
					case bTaken:
						mems[i].data[k.key] = memEntry{val: "other", exp: time.Now().Add(time.Hour)}
					case bError:
						mems[i].err = errMemDown
					case bTimeout:
						mems[i].hang = true
					}
				}
				want := expectedOutcome(bs)

				start := time.Now()
				l, err := c.TryAcquire(context.Background(), "res", time.Second)
				elapsed := time.Since(start)
				want.check(t, err)
				if want.early && elapsed != 0 {
					t.Fatalf("outcome was decided by the quick answers but the call took %v", elapsed)
				}
				if !want.early && elapsed != nodeTimeout {
					t.Fatalf("call took %v, want the node timeout %v", elapsed, nodeTimeout)
				}
				if want.granted {
					if got := holders(c, mems, "res", l.Token()); got < 3 {
						t.Fatalf("granted with only %d nodes holding the token", got)
					}
					if v := l.Until().Sub(start); v != time.Second-driftAllowance(time.Second, defaultDriftFactor) {
						t.Fatalf("validity %v", v)
					}
					if err := l.Release(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				for _, m := range mems {
					m.set(func(m *memNode) { m.hang = false; m.err = nil })
				}
				synctest.Wait()
				time.Sleep(2 * nodeTimeout) // let stragglers answer and be undone
				synctest.Wait()
				for i, m := range mems {
					if v, ok := m.get(k.key); ok && v != "other" {
						t.Fatalf("node %d still holds token %q of a failed or released attempt", i, v)
					}
				}
			})
		})
	}
}

func TestValidity(t *testing.T) {
	cases := []struct {
		ttl, elapsed time.Duration
		drift        float64
		want         time.Duration
	}{
		{10 * time.Second, 0, 0.01, 10*time.Second - 100*time.Millisecond - 2*time.Millisecond},
		{10 * time.Second, 30 * time.Millisecond, 0.01, 10*time.Second - 30*time.Millisecond - 102*time.Millisecond},
		{time.Second, 500 * time.Millisecond, 0, 498 * time.Millisecond},
		{100 * time.Millisecond, 97 * time.Millisecond, 0.01, -0 * time.Millisecond},
		{100 * time.Millisecond, 99 * time.Millisecond, 0.01, -2 * time.Millisecond},
	}
	for _, tc := range cases {
		// The validity: ttl − elapsed − driftAllowance.
		if got := tc.ttl - tc.elapsed - driftAllowance(tc.ttl, tc.drift); got != tc.want {
			t.Errorf("validity(%v, %v, %v) = %v, want %v", tc.ttl, tc.elapsed, tc.drift, got, tc.want)
		}
	}
}

func TestQuorumSizes(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := quorum(n); got != want {
			t.Errorf("quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestRetryDelayIsJitteredWithinRange(t *testing.T) {
	c, _ := memClient(t, 3, WithRetryDelay(10*time.Millisecond, 30*time.Millisecond))
	const n = 2000
	lo, hi := time.Hour, time.Duration(0)
	seen := map[time.Duration]bool{}
	var sum time.Duration
	for range n {
		d := c.retryDelay(ErrLocked)
		if d < 10*time.Millisecond || d > 30*time.Millisecond {
			t.Fatalf("delay %v outside [10ms, 30ms]", d)
		}
		lo, hi = min(lo, d), max(hi, d)
		seen[d] = true
		sum += d
	}
	if hi-lo < 15*time.Millisecond {
		t.Fatalf("delays span only [%v, %v]: not jittered", lo, hi)
	}
	if len(seen) < n/2 {
		t.Fatalf("only %d distinct delays in %d draws", len(seen), n)
	}
	if mean := sum / n; mean < 17*time.Millisecond || mean > 23*time.Millisecond {
		t.Fatalf("mean delay %v, want about 20ms (uniform)", mean)
	}
}
