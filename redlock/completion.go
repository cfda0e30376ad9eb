package redlock

import (
	"strconv"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
)

// withCompletion (lockutil.Completion, the middleware's) ties the
// acquisition to the unit of work id: its own round also looks on every
// node for id's completion record under this resource (completedRun), and
// recordCompletion has the release write it where the lock is still held,
// kept for window (docs/guide/RELIABILITY.md, "Once"). An empty id or a
// window outside (0, lockutil.MaxCompletionWindow] is refused (ErrInvalid).
func withCompletion(id string, window time.Duration) LockOption {
	return func(c *lockConfig) { c.rec = &completionRecord{id: id, window: window} }
}

// completedRun is the run the completion record found by the acquisition
// was written with (the largest where nodes differ), -1 for none.
func (l *Lock) completedRun() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.found.ok {
		return -1
	}
	return l.found.run
}

// completedAt is when the found record's work completed: its expiry on the
// nodes' clock (the latest where they differ) less the acquisition's own
// window, the writer's when both use the same; the zero time for none.
func (l *Lock) completedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.found.ok || l.record == nil {
		return time.Time{}
	}
	return time.UnixMilli(l.found.expiry).Add(-l.record.window)
}

// recordCompletion makes the lock's release (or hand-over) write its id's
// completion record, in its own round, where the lock is still held, for
// run (kept in [0, 1023]). ErrInvalid without withCompletion; ErrNotHeld
// once released or lost: a lost lock's work was not protected to its end.
func (l *Lock) recordCompletion(run int) error {
	return l.markRecord(min(max(run, 0), maxCompletionRun))
}

// forgetCompletion makes the lock's release delete its id's record where
// the lock is still held, instead of writing it: the record found stands
// for other work (an ID reused). A later recordCompletion overrides it.
func (l *Lock) forgetCompletion() error { return l.markRecord(forgetRun) }

// markRecord has the release write the record with run (forgetRun: delete
// it).
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

// completionRecord is a lock's withCompletion record: an entry id in the
// sorted set key, one per resource beside its lock key (so the keyspace does
// not grow with the work done), scored with its expiry on the node's clock.
type completionRecord struct {
	key    string
	id     string
	window time.Duration
	run    int // what the release writes: recordCompletion's, or forgetRun
}

// A record's score is its expiry in ms times runScale plus its run: one
// entry holds both, exact in a float64 score until the year 2248, and
// ZREMRANGEBYSCORE still prunes by expiry.
const (
	runScale         = 1024
	maxCompletionRun = runScale - 1 // the largest run a record keeps
	forgetRun        = -1
	// oldFormatBound: scores below are expiries in ms (until the year
	// 5138), not scaled ones (from 1973 on).
	oldFormatBound = 1e14
)

// recordSeen is what look-ups found of a record: ok when one found it,
// the largest run and the latest expiry (Unix ms, the nodes' clock) of
// those found.
type recordSeen struct {
	ok     bool
	run    int
	expiry int64
}

// add merges what another look-up found into s.
func (s *recordSeen) add(o recordSeen) {
	if o.ok {
		s.ok, s.run, s.expiry = true, max(s.run, o.run), max(s.expiry, o.expiry)
	}
}

// seenOf is what a look-up's score (a call's seen: 0 for none) found.
func seenOf(score int64) recordSeen {
	if score == 0 {
		return recordSeen{}
	}
	return recordSeen{ok: true, run: int(score % runScale), expiry: score / runScale}
}

// lookScore reads a look-up's answer (ZSCORE's reply) for the transport:
// the record's score, its expiry in Unix ms, and whether it is a score; ok
// is false for a reply that is no score, or one of the format before runs
// (an expiry in ms, not scaled), which is not read.
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

// keyRecord checks withCompletion's arguments, if given, and names the
// record's key after resource.
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

// written is the completion record l's release writes: its own once its
// work is done (recordCompletion), else nil.
func (l *Lock) written() *completionRecord {
	if l.record == nil || !l.recordDone {
		return nil
	}
	return l.record
}

// lookOf is the look-up of an acquisition's record (nil without one), sent
// on each node just after the batch that holds the acquisition's call
// (bench/README.md says why not ahead); the transport (look.go) checks a
// found score's expiry against the node's clock.
func lookOf(rec *completionRecord) []any {
	if rec == nil {
		return nil
	}
	return []any{"zscore", rec.key, rec.id}
}
