package scheduler

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"

	"github.com/asynqlock/asynqlock/internal/spantest"
)

// Every tick a replica handles records asynqlock.cron.tick with the job and
// the outcome; the job's own spans are children of the winner's tick span.
// Two replicas, four ticks: each tick has one "ran" and one
// "skipped_other_replica" span.
func TestTickSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp := spantest.New()
		locks := newMemLocks()
		job := funcJob(func(ctx context.Context) error {
			_, s := tp.Tracer("job").Start(ctx, "work")
			s.End()
			return nil
		})
		var crons []*cron.Cron
		for range 2 {
			w, err := newSingleton(locks.client(), "report", []Option{quiet, WithTracerProvider(tp)})
			if err != nil {
				t.Fatal(err)
			}
			crons = append(crons, replica{}.start(w, job))
		}
		time.Sleep(4*time.Second + 500*time.Millisecond)
		stopCrons(crons...)

		perTick := map[string]map[string]int{}
		ranSpans := map[string]bool{}
		for _, s := range tp.Ended() {
			if s.Name() != "asynqlock.cron.tick" {
				continue
			}
			const attrJob, attrTick, attrOutcome = "asynqlock.job", "asynqlock.tick", "asynqlock.outcome"
			a := map[attribute.Key]string{}
			for _, kv := range s.Attributes() {
				a[kv.Key] = fmt.Sprint(kv.Value.AsInterface())
			}
			if a[attrJob] != "report" {
				t.Errorf("tick span without the job: %v", s.Attributes())
			}
			if perTick[a[attrTick]] == nil {
				perTick[a[attrTick]] = map[string]int{}
			}
			perTick[a[attrTick]][a[attrOutcome]]++
			if a[attrOutcome] == string(OutcomeRan) {
				ranSpans[s.SpanContext().SpanID().String()] = true
			}
		}
		if len(perTick) < 4 {
			t.Fatalf("spans of %d ticks, want 4: %v", len(perTick), perTick)
		}
		for tick, outcomes := range perTick {
			if outcomes[string(OutcomeRan)] != 1 || outcomes[string(OutcomeSkippedOtherReplica)] != 1 || len(outcomes) != 2 {
				t.Errorf("tick %s: outcomes %v, want one ran and one skipped_other_replica", tick, outcomes)
			}
		}
		works := 0
		for _, s := range tp.Ended() {
			if s.Name() == "work" {
				works++
				if !ranSpans[s.Parent().SpanID().String()] {
					t.Errorf("the job's span is not a child of a ran tick span")
				}
			}
		}
		if works != len(ranSpans) {
			t.Errorf("%d job spans for %d ticks run", works, len(ranSpans))
		}
		time.Sleep(6 * time.Second) // let the tick records expire
	})
}
