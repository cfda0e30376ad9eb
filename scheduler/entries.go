package scheduler

import (
	"slices"
	"strings"
	"time"
)

// Entry is what a Scheduler knows of one of its jobs.
type Entry struct {
	Job  string    // the job's name
	Spec string    // the spec it was registered with
	Next time.Time // the next activation; zero before Start
	Prev time.Time // the last activation its cron fired; zero if none yet
	// Last is the last outcome reported for the job on this replica (its
	// Outcome is zero if none yet): ran, or skipped because another
	// replica ran the tick, and so on.
	Last Event
	// LastRun is the tick this replica last ran (or enqueued), zero if
	// none.
	LastRun time.Time
	// RanBy names the replica that ran Last.Tick: this one
	// if it did; for a tick another replica ran, the holder its lock
	// record names when the lock client records holders, else "".
	RanBy string
}

// entryState is the part of an Entry a runner keeps.
type entryState struct {
	last       Event
	lastRun    time.Time
	otherRanBy string // the holder of the last tick another replica ran
}

// note records ev for Entries.
func (r *runner) note(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Outcome == OutcomeLate {
		return // the run's own outcome follows
	}
	r.state.last = ev
	switch ev.Outcome {
	case OutcomeRan, OutcomeFailed:
		r.state.lastRun = ev.Tick
	}
}

// Entries returns the registered jobs with their next and last runs,
// sorted by name.
func (s *Scheduler) Entries() []Entry {
	s.mu.Lock()
	jobs := make(map[string]registered, len(s.jobs))
	for n, j := range s.jobs {
		jobs[n] = j
	}
	s.mu.Unlock()
	out := make([]Entry, 0, len(jobs))
	for name, j := range jobs {
		ce := s.cron.Entry(j.id) // zero Next and Prev before Start
		j.r.mu.Lock()
		st := j.r.state
		j.r.mu.Unlock()
		e := Entry{Job: name, Spec: j.spec, Next: ce.Next, Prev: ce.Prev, Last: st.last, LastRun: st.lastRun}
		switch {
		case !e.LastRun.IsZero() && e.LastRun.Equal(e.Last.Tick):
			e.RanBy = j.r.cfg.replica
		case e.Last.Outcome == OutcomeSkippedOtherReplica || e.Last.Outcome == OutcomeSkippedBeyondSkew:
			e.RanBy = st.otherRanBy
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Job, b.Job) })
	return out
}
