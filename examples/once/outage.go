package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// outage waits until a sixth of the tasks ran and handlers are running,
// stops the broker for cfg.down while they return, restarts it with its
// data.
func outage(ctx context.Context, cfg config, rs *replicas, start time.Time, out io.Writer) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ran, _ := rs.h.tally()
		if ran >= cfg.tasks/6 && rs.h.inflight.Load() > 0 {
			break
		}
		if ran == cfg.tasks {
			return errors.New("every task ran before the outage: raise -tasks or -work")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tasks ran in a minute", ran, cfg.tasks)
		}
		if err := pause(ctx, rs, time.Millisecond); err != nil {
			return err
		}
	}
	rs.srv.broker.Stop()
	before, _ := rs.h.tally()
	fmt.Fprintf(out, "%s  broker DOWN, %d of %d tasks applied, %d handlers running\n", at(start), before, cfg.tasks, rs.h.inflight.Load())
	if err := pause(ctx, rs, cfg.down); err != nil {
		return err
	}
	if err := rs.srv.broker.Restart(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s  broker back with its data; asynq does not try again to mark done the tasks that finished meanwhile\n", at(start))
	return nil
}

// pause waits d, or returns early with the context's error or a replica's.
func pause(ctx context.Context, rs *replicas, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-rs.failed:
		return err
	case <-t.C:
		return nil
	}
}
