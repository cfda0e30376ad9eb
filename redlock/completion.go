package redlock

import (
	"strconv"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// withCompletion (lockutil.Completion) ties the acquisition to the work id:
// its round looks for id's record, and the release writes it when asked
// (docs/guide/RELIABILITY.md, "Once").
func withCompletion(id string, window time.Duration) LockOption {
	return func(c *lockConfig) { c.rec = &completionRecord{id: id, window: window} }
}

// completedRun is the run of the record the acquisition found (the largest
// where nodes differ), -1 for none.
func (l *Lock) completedRun() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.found.ok {
		return -1
	}
	return l.found.run
}

// completedAt is when the found record's work completed: its latest expiry
// on the nodes' clock less the window; the zero time for none.
func (l *Lock) completedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.found.ok || l.record == nil {
		return time.Time{}
	}
	return time.UnixMilli(l.found.expiry).Add(-l.record.window)
}

// recordCompletion has the lock's release (or hand-over) write its record
// for run (kept in [0, 1023]); ErrNotHeld once released or lost.
func (l *Lock) recordCompletion(run int) error {
	return l.markRecord(min(max(run, 0), maxCompletionRun))
}

// forgetCompletion has the release delete the record (an ID reused).
func (l *Lock) forgetCompletion() error { return l.markRecord(forgetRun) }

func (l *Lock) markRecord(run int) error {
	if l.record == nil {
		return invalidf("recordCompletion: the lock was acquired without withCompletion")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return ErrNotHeld
	}
	l.recordDone, l.record.run = true, run
	return nil
}

// completionRecord is an entry id in the sorted set key, one set per
// resource, scored with its expiry on the node's clock.
type completionRecord struct {
	key    string
	id     string
	window time.Duration
	run    int // what the release writes: recordCompletion's, or forgetRun
}

// A record's score is its expiry in ms times runScale plus its run, exact
// in a float64 until the year 2248 (docs/design/REDLOCK.md).
const (
	runScale         = 1024
	maxCompletionRun = runScale - 1
	forgetRun        = -1
	oldFormatBound   = 1e14 // below: unscaled expiries in ms, the format before runs
)

// recordSeen is what look-ups found of a record: the largest run and the
// latest expiry (Unix ms, the nodes' clock).
type recordSeen struct {
	ok     bool
	run    int
	expiry int64
}

func (s *recordSeen) add(o recordSeen) {
	if o.ok {
		s.ok, s.run, s.expiry = true, max(s.run, o.run), max(s.expiry, o.expiry)
	}
}

func seenOf(score int64) recordSeen {
	if score == 0 {
		return recordSeen{}
	}
	return recordSeen{ok: true, run: int(score % runScale), expiry: score / runScale}
}

// lookScore reads ZSCORE's reply: the score and its expiry in Unix ms; not
// ok for no score or one of the old format.
func lookScore(v any) (score, expiry int64, ok bool) {
	f, ok := v.(float64)
	if str, isStr := v.(string); isStr {
		parsed, err := strconv.ParseFloat(str, 64)
		f, ok = parsed, err == nil
	}
	if s := int64(f); ok && s >= oldFormatBound {
		return s, s / runScale, true
	}
	return 0, 0, false
}

// recordSuffix follows a resource's lock key in the name of its records.
const recordSuffix = ":done"

func (c *Client) keyRecord(resource string, rec *completionRecord) error {
	switch {
	case rec == nil:
		return nil
	case rec.id == "":
		return invalidf("completion record: empty id")
	case rec.window <= 0 || rec.window > lockutil.MaxCompletionWindow:
		return invalidf("completion record: window %v outside (0, %v]", rec.window, lockutil.MaxCompletionWindow)
	}
	rec.key = keyOf(c.cfg.prefix, resource) + recordSuffix
	return nil
}

// written is the record l's release writes, nil before recordCompletion.
func (l *Lock) written() *completionRecord {
	if l.record == nil || !l.recordDone {
		return nil
	}
	return l.record
}

// lookOf is the look-up of an acquisition's record (nil without one), sent
// after the call's batch (bench/README.md says why not ahead).
func lookOf(rec *completionRecord) []any {
	if rec == nil {
		return nil
	}
	return []any{"zscore", rec.key, rec.id}
}
