package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hibiken/asynq"
)

// seen is what one look at the broker and the handlers found.
type seen struct {
	ran      int   // tasks applied at least once
	inflight int32 // handlers running
	qi       *asynq.QueueInfo
	active   int // tasks the broker lists as running
	expired  int // of those, past their lease
	missed   int // of those, applied: asynq missed their completion
}

// waiter follows the run after the outage.
type waiter struct {
	cfg        config
	rs         *replicas
	insp       *asynq.Inspector
	start      time.Time
	out        io.Writer
	allExpired time.Time // since when every task listed as running is past its lease
	joined     bool      // replica 3 started
}

// waitDone waits (at most 4 minutes) until every task was applied and the
// broker lists none as queued, running or to retry, saying every 10s what
// it waits for.
func waitDone(ctx context.Context, cfg config, rs *replicas, start time.Time, out io.Writer) error {
	w := &waiter{cfg: cfg, rs: rs, start: start, out: out, insp: asynq.NewInspector(asynq.RedisClientOpt{Addr: rs.srv.broker.Addr()})}
	defer w.insp.Close()
	deadline := time.Now().Add(4 * time.Minute)
	next := time.Now().Add(10 * time.Second)
	for {
		s, err := w.look()
		if err != nil {
			return err
		}
		if s.ran == cfg.tasks && s.inflight == 0 && s.qi.Pending+s.qi.Active+s.qi.Retry+s.qi.Scheduled == 0 {
			fmt.Fprintf(out, "%s  every task completed\n", at(start))
			return nil
		}
		if err := w.joinWhenDue(s); err != nil {
			return err
		}
		if time.Now().After(next) {
			next = next.Add(10 * time.Second)
			fmt.Fprintf(out, "%s  waiting for asynq: %d of %d tasks applied, %d handlers running; the broker lists %d as running (%d past their lease), %d queued, %d to retry\n",
				at(start), s.ran, cfg.tasks, s.inflight, s.active, s.expired, s.qi.Pending, s.qi.Retry+s.qi.Scheduled)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after 4 minutes: %d of %d tasks applied, %d listed as running, %d to retry", s.ran, cfg.tasks, s.active, s.qi.Retry)
		}
		if err := pause(ctx, rs, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// look reads the broker's queue and the tasks it lists as running.
func (w *waiter) look() (seen, error) {
	var s seen
	s.ran, _ = w.rs.h.tally()
	s.inflight = w.rs.h.inflight.Load()
	var err error
	if s.qi, err = w.insp.GetQueueInfo("default"); err != nil {
		return s, fmt.Errorf("broker: %w", err)
	}
	active, err := w.insp.ListActiveTasks("default", asynq.PageSize(1000))
	if err != nil {
		return s, fmt.Errorf("broker: %w", err)
	}
	s.active = len(active)
	for _, t := range active {
		if t.IsOrphaned {
			s.expired++
		}
		if w.rs.h.applied(t.ID) {
			s.missed++
		}
	}
	return s, nil
}

// joinWhenDue starts replica 3 once every task the broker lists as running
// has been past its lease for 30s: asynq's recoverer takes such a task back,
// and a server runs its recoverer at its start (then every minute, so the
// running replicas' next pass may come up to a minute later).
func (w *waiter) joinWhenDue(s seen) error {
	if w.joined {
		return nil
	}
	if s.active == 0 || s.expired < s.active {
		w.allExpired = time.Time{}
		return nil
	}
	if w.allExpired.IsZero() {
		w.allExpired = time.Now()
		fmt.Fprintf(w.out, "%s  the broker lists %d tasks as running, none is: %d applied (asynq missed their completion), %d failed (it missed\n"+
			"         their retry); all past their lease (30s from their last heartbeat). asynq's recoverer takes them back\n"+
			"         30s on, at its pass at a server's start or every minute after\n", at(w.start), s.active, s.missed, s.active-s.missed)
	}
	if time.Since(w.allExpired) < 30*time.Second+500*time.Millisecond {
		return nil
	}
	w.joined = true
	fmt.Fprintf(w.out, "%s  replica 3 starts: its recoverer's first pass takes them back\n", at(w.start))
	return w.rs.start()
}
