package redlock

import (
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// outcome classifies one node's answer in a round.
type outcome uint8

const (
	outPending outcome = iota
	outOK              // the node did what was asked (set, extended, released)
	outRefused         // the node answered no (key held by another / not ours)
	outFailed          // error or timeout: we do not know what the node did
)

// classifyAnswered counts any answer as OK.
func classifyAnswered(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	return outOK
}

// classifySet is for SET NX and the fencing acquire script: a value means
// set, nil means held by another.
func classifySet(rep transport.Reply) outcome {
	switch {
	case rep.Err == nil:
		return outOK
	case rep.Err == redis.Nil:
		return outRefused
	}
	return outFailed
}

// classifyOne is for scripts answering 1 (done) or 0 (not our key).
func classifyOne(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if n, ok := rep.Val.(int64); ok && n == 1 {
		return outOK
	}
	return outRefused
}

// tally counts the outcomes of a round and decides it as soon as the result
// cannot change: need successes reached, or so many nodes refused or failed
// that the remaining ones cannot bring the count up to need.
type tally struct {
	total, need         int
	ok, refused, failed int
}

func (t *tally) add(o outcome) {
	switch o {
	case outOK:
		t.ok++
	case outRefused:
		t.refused++
	case outFailed:
		t.failed++
	}
}

// decided reports whether the round's outcome is known.
func (t *tally) decided() bool {
	return t.ok >= t.need || t.total-t.refused-t.failed < t.need
}

// success reports whether need nodes answered OK.
func (t *tally) success() bool { return t.ok >= t.need }

// causes are the sentinels for a round that did not succeed, from what was
// known when it was decided: ErrQuorum when failures alone left fewer than
// need nodes able to answer, ErrLocked when refusals (another holder) alone
// did, both when it took the two together. Answers arrive in any order, so
// the label is built to be stable where it matters: a round in which a
// majority failed always matches ErrQuorum, one in which no node failed
// never does, and one in which no node was held by another never matches
// ErrLocked.
func (t *tally) causes() []error {
	byFailures := t.total-t.failed < t.need
	byRefusals := t.total-t.refused < t.need
	switch {
	case byFailures:
		return []error{ErrQuorum}
	case byRefusals:
		return []error{ErrLocked}
	}
	return []error{ErrLocked, ErrQuorum}
}

// quorum is the Redlock majority for n nodes.
func quorum(n int) int { return n/2 + 1 }

// driftAllowance is the clock-drift margin subtracted from a TTL: a lock
// set with ttl is valid ttl − elapsed − (ttl·driftFactor + 2ms).
func driftAllowance(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}
