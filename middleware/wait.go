package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/asynqlock/asynqlock/redlock"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// waitFor waits up to bound for the lock as the waiter that enterWait
// counted in e, holding no run place meanwhile.
func (r *taskRun) waitFor(ctx context.Context, e *resState,
	bound time.Duration) (*redlock.Lock, error) {
	r.place.drop()
	lock, err := r.m.waitRounds(ctx, r.res, bound, r.opts)
	r.m.leaveWait(r.res, e, lock != nil)
	return lock, err
}

// waitRounds waits up to bound for res, until shortly before the task's
// deadline. The wait is renewed, up to maxRounds bounds, unless the resource
// is seen stuck: the same holder at stuck bound ends in a row with no release
// here (1 with parking, 4 without, where a requeue costs more), or the lock
// nodes failed.
func (m *mw) waitRounds(ctx context.Context, res string, bound time.Duration,
	opts []redlock.LockOption) (lock *redlock.Lock, err error) {
	ctx, span := m.startWait(ctx, res)
	rounds := 1
	defer func() { m.endWait(span, rounds, err) }()
	holder, same, stuck := "", 0, 4
	if m.cfg.broker != nil {
		stuck = 1
	}
	var waited time.Duration
	for ; ; rounds++ {
		since := time.Now()
		b, last := bound, false
		if left, ok := timeLeft(ctx); ok && left <= bound {
			b, last = max(left, 0), true // the task's deadline ends the wait, with a conflict
		}
		wctx, cancel := context.WithTimeout(ctx, b)
		lock, err = m.client.Acquire(wctx, res, m.cfg.ttl, opts...)
		ended := wctx.Err() != nil
		cancel()
		waited += time.Since(since)
		if err == nil || ctx.Err() != nil || !ended {
			return lock, err
		}
		noQuorum := quorumLost(err)
		if rounds < maxRounds && !noQuorum && !last {
			// Behind a holder of this process a waiter hears only
			// ErrLocked: the nodes tell whether they fail.
			now, known := m.holderOf(ctx, res)
			if !known {
				noQuorum = true
			} else if now != "" && now == holder && !m.stateOf(res).released.After(since) {
				same++
			} else {
				same = 0
			}
			holder = now
			if !noQuorum && same < stuck {
				continue
			}
		}
		// Not a deadline error, which asynq could take for the task's.
		cause := redlock.ErrLocked
		if noQuorum { // for a bound, arrivals beside a local holder try first (heldHere)
			cause = redlock.ErrQuorum
			m.mu.Lock()
			m.outage = time.Now().Add(bound)
			m.mu.Unlock()
		}
		return nil, fmt.Errorf("%w (after waiting %v)", cause, waited.Round(time.Millisecond))
	}
}

// startWait starts the wait span, parent of the wait's acquisitions.
func (m *mw) startWait(ctx context.Context, res string) (context.Context, trace.Span) {
	ctx, span := m.tracer.Start(ctx, spanWait, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attrResource.String(res))
	}
	return ctx, span
}

// endWait records how a wait ended and how many rounds it took.
func (m *mw) endWait(span trace.Span, rounds int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(lockutil.Outcome(err)), attrRounds.Int(rounds))
		if err != nil && !errors.Is(err, redlock.ErrLocked) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// holderOf returns the token most lock nodes report for res ("" when none),
// each slot's in order for a resource of several; known is false when fewer
// than a majority of the nodes answered.
func (m *mw) holderOf(ctx context.Context, res string) (token string, known bool) {
	ictx, cancel := context.WithTimeout(ctx, lockutil.ReleaseTimeout)
	defer cancel()
	states, err := m.client.Inspect(ictx, res)
	if err != nil {
		return "", false
	}
	count := map[string]int{}
	best := make([]string, 1)
	nodes, answered := 0, 0
	for _, st := range states {
		if st.Slot == 0 {
			nodes++
			if st.Err == nil {
				answered++
			}
		}
		if st.Err != nil || st.Token == "" {
			continue
		}
		for len(best) <= st.Slot {
			best = append(best, "")
		}
		if count[st.Token]++; count[st.Token] > count[best[st.Slot]] {
			best[st.Slot] = st.Token
		}
	}
	return strings.TrimSpace(strings.Join(best, " ")), answered > nodes/2
}

const maxRounds = 15 // renewals of a wait while its resource makes progress

// timeLeft is how long a task may still wait for its lock: until shortly
// before its deadline, so that it returns a conflict rather than asynq's
// deadline error (docs/guide/MIDDLEWARE.md). ok is false without a deadline.
func timeLeft(ctx context.Context) (time.Duration, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	left := time.Until(dl)
	return left - min(time.Second, max(left/5, 20*time.Millisecond)), true
}
