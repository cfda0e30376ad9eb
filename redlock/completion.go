package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrCompleted means the work of a completion id (WithCompletion) was
// already done under the resource's lock: Run did not call its function.
var ErrCompleted = errors.New("redlock: already completed")

// MaxCompletionWindow bounds WithCompletion's window: records are kept on
// every lock node for their whole window (docs/OPERATIONS.md sizes them).
const MaxCompletionWindow = 30 * 24 * time.Hour

// WithCompletion ties the acquisition to a unit of work named id (a task's
// stable ID): the acquisition's own round also looks on every node for a
// completion record of id under this resource, and Lock.FoundCompletion
// reports whether it found one; Lock.RecordCompletion makes the lock's
// release write that record, in the release's own round, on every node that
// still holds the lock, kept for window. A record on one node that answers is
// enough to find it: written by a majority, it survives the loss of a
// minority's data. A hand-over to a caller acquiring WithCompletion waits for
// its round (as WithFencing's does), so that the caller learns of a record
// before it starts. An empty id or a window outside (0, MaxCompletionWindow]
// is refused with ErrInvalid. Default: no record.
func WithCompletion(id string, window time.Duration) LockOption {
	return func(c *lockConfig) { c.completion, c.window = id, window }
}

// FoundCompletion reports whether the acquisition found a completion record
// of its WithCompletion id: the work was done before, by a holder that
// recorded it. It is false without WithCompletion.
func (l *Lock) FoundCompletion() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.found
}

// RecordCompletion makes the lock's release (or hand-over) write the
// completion record of its WithCompletion id, in the same round as the
// release, on every node where the lock is still held. Call it once the
// work succeeded, before Release or ReleaseAsync. It returns ErrInvalid for
// a lock acquired without WithCompletion and ErrNotHeld for one released or
// lost: a lost lock's work was not protected to its end, and no record is
// written for it.
func (l *Lock) RecordCompletion() error {
	if l == nil {
		return ErrNotHeld
	}
	if l.record == nil {
		return invalidf("RecordCompletion: the lock was acquired without WithCompletion")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return ErrNotHeld
	}
	l.recordDone = true
	return nil
}

// completionRecord is a lock's WithCompletion record: an entry id in the
// sorted set key (next to the resource's lock key, in its hash slot), one
// set per resource, scored with the entry's expiry on the writer's clock.
// One key per resource, not per record: the keyspace does not grow with the
// work done, and a node's memory per record is an entry of a set.
type completionRecord struct {
	key    string
	id     string
	window time.Duration
}

// recordSuffix follows a resource's lock key in the name of its records.
const recordSuffix = ":done"

// checkCompletion validates WithCompletion's arguments, if given.
func (lc *lockConfig) checkCompletion() error {
	if lc.completion == "" && lc.window == 0 {
		return nil
	}
	switch {
	case lc.completion == "":
		return invalidf("WithCompletion: empty id")
	case lc.window <= 0 || lc.window > MaxCompletionWindow:
		return invalidf("WithCompletion: window %v outside (0, %v]", lc.window, MaxCompletionWindow)
	}
	return nil
}

// recordOf is the completion record an acquisition of resource asks for,
// nil without WithCompletion.
func (c *Client) recordOf(resource string, lc *lockConfig) *completionRecord {
	if lc.completion == "" {
		return nil
	}
	return &completionRecord{key: keyOf(c.cfg.prefix, resource) + recordSuffix, id: lc.completion, window: lc.window}
}

// sideCmds are commands sent just ahead of a round's call on each
// node; with look, the last one is a look-up whose answer (not nil) means
// found.
type sideCmds struct {
	cmds [][]any
	look bool
}

// writeCmds write the record in one script call (lua/record.lua): entries
// past their expiry go first (the set holds a window's worth of records),
// and the set lives a window past its last entry. One call, not three
// commands: a task's process CPU through asynq was a fifth above plain
// records-off with three. Expiry is judged on the writer's wall clock:
// clocks that differ by seconds move it by seconds against a window of an
// hour.
func (rec *completionRecord) writeCmds() [][]any {
	return [][]any{recordScript.args([]string{rec.key}, rec.id, rec.window.Milliseconds(), time.Now().UnixMilli())}
}

// sides are the side commands of a round: the releasing lock's record
// write, if its work is done, then the acquiring caller's look-up (in that
// order, so that a hand-over between two runs of one id finds the record).
// An entry older than the window may still be found until the next write
// drops it: a record is kept at least its window.
func sides(releasing *Lock, acquiring *completionRecord) *sideCmds {
	var s sideCmds
	if releasing != nil && releasing.record != nil && releasing.recordDone {
		s.cmds = releasing.record.writeCmds()
	}
	if acquiring != nil {
		s.cmds = append(s.cmds, []any{"zscore", acquiring.key, acquiring.id})
		s.look = true
	}
	if s.cmds == nil {
		return nil
	}
	return &s
}

// countSides is the number of side commands of a batch's calls.
func countSides(live []*call) int {
	n := 0
	each(live, func(c *call) {
		if c.side != nil {
			n += len(c.side.cmds)
		}
	})
	return n
}

// addSides builds the side commands of a batch's calls into cmds, in the
// calls' order, ahead of every call of the batch: a record written ahead of
// the other calls of its batch is still written while its lock is held.
func addSides(ctx context.Context, live []*call, cmds []*redis.Cmd) {
	i := 0
	each(live, func(c *call) {
		if c.side == nil {
			return
		}
		for _, args := range c.side.cmds {
			cmds[i] = redis.NewCmd(ctx, args...)
			i++
		}
	})
}

// readSides stores the side commands' answers in their calls: a look-up
// that found its entry sets seen; another failure sets sideErr. It reports
// whether a script was missing on the node (restarted, SCRIPT FLUSH): the
// next batch loads the scripts again, and this record is written on the
// other nodes.
func readSides(live []*call, cmds []*redis.Cmd) (noScript bool) {
	i := 0
	each(live, func(c *call) {
		if c.side == nil {
			return
		}
		for j := range c.side.cmds {
			err := cmds[i].Err()
			i++
			look := c.side.look && j == len(c.side.cmds)-1
			switch {
			case look && err == nil:
				c.seen = true
			case err != nil && err != redis.Nil:
				c.sideErr = nodeErr(err)
				noScript = noScript || redis.HasErrorPrefix(err, "NOSCRIPT")
			}
		}
	})
	return noScript
}

// each calls fn for every call of a batch, those folded into one included.
func each(live []*call, fn func(*call)) {
	for _, c := range live {
		if c.joined == nil {
			fn(c)
			continue
		}
		for _, j := range c.joined {
			fn(j)
		}
	}
}

// recordShortfall is the error of a release round whose lock had a record to
// write that fewer than a majority of nodes stored (say, a node out of
// memory refused the write): a later run of the same work may not find it.
func (r *round) recordShortfall(l *Lock) error {
	if l.record == nil || !l.recordDone || r.sideFailed == 0 {
		return nil
	}
	if stored := r.t.ok - r.sideFailed; stored < r.c.q {
		return r.err([]error{ErrQuorum}, fmt.Sprintf("completion record stored on %d of %d nodes (quorum %d): a re-delivery may run the work again", stored, r.t.total, r.c.q))
	}
	return nil
}
