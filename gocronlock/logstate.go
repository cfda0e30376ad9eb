package gocronlock

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// jobState is what a job's log lines follow: a Warn is logged once when the
// job's state changes to it, its repeats at Debug, and the run that ends it
// once at Info, so that lock nodes down for an hour make one line per job
// (the observer still gets every event), as the scheduler package does.
type jobState struct {
	mu      sync.Mutex
	outcome Outcome // the outcome last logged at Warn; "" if healthy
	repeats int     // reports of it since, logged at Debug
	armed   bool    // overlap: a run came since the last skip

	// pace: an interval job that gocron runs more often than registered
	lastLock time.Time // this replica's last Lock of the job, by its clock
	short    int       // Locks in a row that came under half an interval apart
	fast     bool      // warned that the job runs more often than registered
}

// report sends ev to the observer and logs it at the level its job's state
// calls for.
func (l *Locker) report(ev Event) {
	if l.cfg.observer != nil {
		l.cfg.observer(ev)
	}
	st := l.state(ev.Job)
	lvl, back, prev, repeats := st.judge(ev.Outcome)
	log := l.cfg.logger
	if back {
		l.logBack(ev.Job, ev.Outcome, prev, repeats)
	}
	args := []any{"job", ev.Job, "outcome", string(ev.Outcome)}
	if !ev.Tick.IsZero() {
		args = append(args, "tick", ev.Tick)
	}
	if ev.Err != nil {
		args = append(args, "err", ev.Err)
	}
	log.Log(context.Background(), lvl, message(ev.Outcome), args...)
}

// judge returns the level of an outcome and whether it ends a trouble (with
// the trouble's outcome and repeats).
func (st *jobState) judge(o Outcome) (lvl slog.Level, back bool, prev Outcome, repeats int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	lvl, prev, repeats = o.level(), st.outcome, st.repeats
	switch {
	case lvl < slog.LevelWarn:
		if prev != "" && st.ends(o) {
			st.outcome, st.repeats, st.armed = "", 0, false
			return lvl, true, prev, repeats
		}
	case prev == o:
		st.repeats++
		st.armed = false
		lvl = slog.LevelDebug
	default:
		st.outcome, st.repeats, st.armed = o, 0, false
	}
	return lvl, false, prev, repeats
}

// ends reports whether a healthy outcome ends the trouble. An overlap ends
// with two runs of this replica with no skip between them: a job that
// overruns its interval runs a tick after each skip. A lost lock ends with
// a run that keeps its lock to the end (completed), not with a won tick.
func (st *jobState) ends(o Outcome) bool {
	if st.outcome == OutcomeLost {
		return false
	}
	if st.outcome == OutcomeSkippedOverlap {
		if o != OutcomeRan {
			return false
		}
		done := st.armed
		st.armed = true
		return done
	}
	return o == OutcomeRan || o == OutcomeSkippedOtherReplica && st.outcome == OutcomeLockError
}

// completed notes a run that kept its running lock to the end: it ends a
// lost-lock trouble.
func (l *Locker) completed(job string) {
	st := l.state(job)
	st.mu.Lock()
	prev, repeats := st.outcome, st.repeats
	back := prev == OutcomeLost
	if back {
		st.outcome, st.repeats, st.armed = "", 0, false
	}
	st.mu.Unlock()
	if back {
		l.logBack(job, OutcomeRan, prev, repeats)
	}
}

// logBack logs, once, that a job's trouble ended.
func (l *Locker) logBack(job string, o, prev Outcome, repeats int) {
	l.cfg.logger.Info("gocron job back to normal", "job", job, "outcome", string(o), "after", string(prev), "repeats", repeats)
}

// checkPace warns, once per change, when this replica locks an interval job
// under half its registered interval apart twice in a row: gocron runs it
// more often than registered, and the runs between ticks find the tick
// taken, so the job would run less often than its schedule says.
func (l *Locker) checkPace(job string, every time.Duration, now time.Time) {
	st := l.state(job)
	st.mu.Lock()
	gap, seen := now.Sub(st.lastLock), !st.lastLock.IsZero()
	st.lastLock = now
	if seen && gap >= 0 && gap < every/2 {
		st.short++
	} else {
		st.short, st.fast = 0, false
	}
	warn := st.short == 2 && !st.fast
	st.fast = st.fast || warn
	st.mu.Unlock()
	if warn {
		l.cfg.logger.Warn("gocron job runs more often than the interval registered with gocronlock.WithInterval: "+
			"register the job's own interval, or most of its runs are skipped as taken",
			"job", job, "interval", every, "gap", gap)
	}
}

// state returns the log state of a job, made on first use (for names New
// was not given, too: each is warned about once).
func (l *Locker) state(name string) *jobState {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.states[name]
	if !ok {
		st = &jobState{}
		l.states[name] = st
	}
	return st
}

// message is the log message of an outcome.
func message(o Outcome) string {
	switch o {
	case OutcomeRan:
		return "gocron job tick won"
	case OutcomeSkippedOtherReplica:
		return "gocron job tick taken by another replica"
	case OutcomeSkippedOverlap:
		return "gocron job tick skipped: the previous run still runs"
	case OutcomeSkippedBeyondSkew:
		return "gocron job run skipped: not within the skew of an activation; fix the clock, raise WithSkew, or avoid delaying runs (limit modes, RunNow)"
	case OutcomeLockError:
		return "gocron job tick not run: lock nodes unavailable"
	case OutcomeUnknownJob:
		return "gocron job not registered with the locker: it runs nowhere; register it with gocronlock.WithInterval or WithCron"
	case OutcomeLost:
		return "gocron job running lock lost: another replica may start the job while this run goes on"
	}
	return "gocron job: " + string(o)
}
