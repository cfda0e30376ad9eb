package scheduler

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Entries shows each job's next and previous activation, its last outcome
// on this replica and the last tick this replica ran.
func TestEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		locks := newMemLocks()
		a := newTestScheduler(t, locks.client(), withReplica("a"))
		b := newTestScheduler(t, locks.client(), withReplica("b"), withClock(func() time.Time { return time.Now() }))
		for _, s := range []*Scheduler{a, b} {
			if err := s.Register("fails", "*/2 * * * * *", func(context.Context) error { return errors.New("disk full") }); err != nil {
				t.Fatal(err)
			}
			if err := s.Register("ok", "*/5 * * * * *", nop); err != nil {
				t.Fatal(err)
			}
		}
		if e := a.Entries(); len(e) != 2 || e[0].Job != "fails" || e[0].Spec != "*/2 * * * * *" || !e[0].Next.IsZero() {
			t.Fatalf("before Start: %+v", e)
		}
		a.Start()
		time.Sleep(time.Second) // a alone wins the first ticks
		b.Start()
		time.Sleep(5*time.Second + 700*time.Millisecond) // losers retry for max(skew, 250ms)/2
		ea, eb := a.Entries(), b.Entries()
		for _, s := range []*Scheduler{a, b} {
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for i, job := range []struct {
			name       string
			next, prev time.Duration
			won        Outcome
		}{{"fails", 8 * time.Second, 6 * time.Second, OutcomeFailed}, {"ok", 10 * time.Second, 5 * time.Second, OutcomeRan}} {
			winners := 0
			for k, e := range []Entry{ea[i], eb[i]} {
				name := []string{"a", "b"}[k]
				if e.Job != job.name || !e.Next.Equal(t0.Add(job.next)) || !e.Prev.Equal(t0.Add(job.prev)) || !e.Last.Tick.Equal(e.Prev) {
					t.Errorf("%s on %s: %+v", job.name, name, e)
				}
				switch e.Last.Outcome {
				case job.won:
					winners++
					if !e.LastRun.Equal(e.Prev) || e.RanBy != name || e.Last.Replica != name {
						t.Errorf("%s on %s ran its last tick: %+v", job.name, name, e)
					}
				case OutcomeSkippedOtherReplica:
					if e.LastRun.Equal(e.Prev) {
						t.Errorf("%s on %s: a skipped tick counted as run: %+v", job.name, name, e)
					}
				default:
					t.Errorf("%s on %s: outcome %v", job.name, name, e.Last.Outcome)
				}
			}
			if winners != 1 {
				t.Errorf("%s: %d replicas ran the last tick", job.name, winners)
			}
		}
		time.Sleep(6 * time.Second)
	})
}
