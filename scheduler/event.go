package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynqlock/asynqlock/statelog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Outcome tells what became of one run of a job on one replica; its value
// is suitable as a metric label.
type Outcome string

// Outcomes. Each run reports exactly one; OutcomeLate comes before the late
// run's own; OutcomeClock is a clock measurement (docs/guide/CRON.md).
const (
	// OutcomeRan: this replica ran the tick (the job returned nil), or the
	// bridge enqueued its task.
	OutcomeRan Outcome = "ran"
	// OutcomeFailed: the job returned an error or panicked, its lock was lost
	// (redlock.ErrLockLost), the bridge could not enqueue, or NewJobs was not
	// given the job.
	OutcomeFailed Outcome = "failed"
	// OutcomeSkippedOtherReplica: another replica has the tick. Not an error.
	OutcomeSkippedOtherReplica Outcome = "skipped_other_replica"
	// OutcomeSkippedOverlap: the previous run still ran; the tick runs nowhere.
	OutcomeSkippedOverlap Outcome = "skipped_overlap"
	// OutcomeSkippedBeyondSkew: the run started more than the skew after any
	// activation (Tick is zero), or another replica ran the tick earlier
	// than the skew allows: fix the clock or raise WithSkew.
	OutcomeSkippedBeyondSkew Outcome = "skipped_beyond_skew"
	// OutcomeLockError: the lock nodes gave no answer (redlock.ErrQuorum,
	// redis.ErrClosed, a context error) or one too late; the tick did not run here.
	OutcomeLockError Outcome = "lock_error"
	// OutcomeLate: a run starts Duration late: it waited for the previous
	// run, or catches up a tick no replica ran (Err says which).
	OutcomeLate Outcome = "late"
	// OutcomeClock: this replica's clock offset to one lock node (Node,
	// Offset; Duration is the round trip, Err a failure).
	OutcomeClock Outcome = "clock"
)

var (
	errWaited   = errors.New("scheduler: waited for the previous run")
	errCaughtUp = errors.New("scheduler: caught up: no replica ran this tick")
)

// Event is what the observer receives for a run or a clock measurement.
type Event struct {
	Job      string        // the job's name
	Tick     time.Time     // the activation the run belongs to; zero if none
	Outcome  Outcome       // what became of the run
	Duration time.Duration // the job's run time (ran, failed), how late (late), the round trip (clock)
	TaskID   string        // the asynq task ID (bridge only): "cron:<job>:<tick in Unix ms>"
	Err      error         // the cause of a failure or skip, or why a run is late
	Replica  string        // the replica that reports the event (its "<hostname>:<pid>")
	Node     string        // clock: the lock node's address (no credentials)
	Offset   time.Duration // clock: the node's clock minus this replica's

	span trace.Span // the tick's span, ended by report
}

// logState is what a job's log lines follow: a line per change of state.
type logState struct {
	trouble   statelog.State // the job's last Warn or Error outcome
	armed     bool           // overlap: a run ended since the last skip (guarded by runner.mu)
	byID      statelog.State // bridge: enqueueing by task ID alone, nodes unavailable
	outOfStep statelog.State // another replica runs the job at other ticks
	pace      statelog.State // interval job: started more often than its interval
}

// report logs ev, records it for Entries and its span, and hands it to the
// observer.
func (r *runner) report(ev Event) {
	ev.Job, ev.Replica = r.name, r.cfg.replica
	attrs := []any{"job", ev.Job, "outcome", string(ev.Outcome), "replica", ev.Replica}
	if !ev.Tick.IsZero() {
		attrs = append(attrs, "tick", ev.Tick)
	}
	if ev.Duration > 0 {
		attrs = append(attrs, "duration", ev.Duration)
	}
	if ev.TaskID != "" {
		attrs = append(attrs, "task_id", ev.TaskID)
	}
	if pe := (*panicError)(nil); errors.As(ev.Err, &pe) {
		attrs = append(attrs, "stack", string(pe.stack))
	}
	r.log(ev, attrs)
	if ev.Outcome != OutcomeLate { // the run's own outcome follows
		r.mu.Lock()
		r.state.last = ev
		if ev.Outcome == OutcomeRan || ev.Outcome == OutcomeFailed {
			r.state.lastRun = ev.Tick
		}
		r.mu.Unlock()
	}
	endTick(ev)
	if r.cfg.observer != nil {
		r.cfg.observer(ev)
	}
}

// level is an event's log level before repeats are muted: nothing a
// healthy job does per tick above Debug; skips, lock errors and a
// caught-up tick at Warn; failures at Error.
func (e Event) level() slog.Level {
	switch {
	case e.Outcome == OutcomeSkippedOverlap || e.Outcome == OutcomeLockError || e.Outcome == OutcomeSkippedBeyondSkew,
		e.Outcome == OutcomeLate && errors.Is(e.Err, errCaughtUp):
		return slog.LevelWarn
	case e.Outcome == OutcomeFailed:
		return slog.LevelError
	}
	return slog.LevelDebug
}

// log logs ev at its level once while a Warn or Error outcome repeats (then
// Debug), and once at Info the outcome that ends it.
func (r *runner) log(ev Event, attrs []any) {
	lvl, log, msg := ev.level(), r.cfg.logger, "cron job "+string(ev.Outcome)
	switch {
	case ev.Outcome == OutcomeLate: // a state of one run, its own outcome follows
		log.Log(context.Background(), lvl, msg, append(attrs, "err", ev.Err)...)
	case lvl >= slog.LevelWarn:
		r.mu.Lock()
		r.logs.armed = false
		r.mu.Unlock()
		r.logs.trouble.Fail(log, lvl, msg, ev.Err, attrs...)
	default:
		if ev.Err != nil {
			attrs = append(attrs, "err", ev.Err)
		}
		log.Debug(msg, attrs...)
		if r.ends(ev.Outcome) {
			r.logs.trouble.OK(log, "cron job back to normal", "job", r.name, "replica", r.cfg.replica, "outcome", string(ev.Outcome))
		}
	}
}

// ends reports whether a healthy outcome ends the trouble, from this
// replica's own evidence: a run ends a failure or a skip beyond the skew; a
// tick another replica ran also shows the lock nodes answer again; an
// overlap ends with two runs here with no skip between them (a job that
// overruns its interval runs a tick after each skip).
func (r *runner) ends(o Outcome) bool {
	switch r.logs.trouble.Failing() {
	case "":
		return false
	case "cron job " + string(OutcomeSkippedOverlap):
		r.mu.Lock()
		defer r.mu.Unlock()
		done := o == OutcomeRan && r.logs.armed
		r.logs.armed = r.logs.armed || o == OutcomeRan
		return done
	case "cron job " + string(OutcomeLockError):
		return o == OutcomeRan || o == OutcomeSkippedOtherReplica
	}
	return o == OutcomeRan
}

// startTick starts the span of one tick of the job.
func (r *runner) startTick(ev *Event, catchUp bool) {
	_, span := r.tracer.Start(context.Background(), "asynqlock.cron.tick", trace.WithAttributes(
		attribute.String("asynqlock.job", r.name), attribute.String("asynqlock.tick", ev.Tick.UTC().Format("2006-01-02T15:04:05.000Z"))))
	if catchUp {
		span.SetAttributes(attribute.Bool("asynqlock.late", true))
	}
	ev.span = span
}

// endTick records the tick's outcome on its span and ends it; a late run's
// notice is an event, its own outcome comes after.
func endTick(ev Event) {
	switch {
	case ev.span == nil:
		return
	case ev.Outcome == OutcomeLate:
		ev.span.AddEvent("asynqlock.cron.late")
		return
	case ev.span.IsRecording():
		ev.span.SetAttributes(attribute.String("asynqlock.outcome", string(ev.Outcome)))
		if ev.Err != nil && (ev.Outcome == OutcomeFailed || ev.Outcome == OutcomeLockError) {
			ev.span.SetStatus(codes.Error, ev.Err.Error())
		}
	}
	ev.span.End()
}
