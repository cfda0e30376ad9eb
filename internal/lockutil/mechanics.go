package lockutil

import (
	"context"
	"time"
)

// Mechanics are what a redlock lock does for this module's middleware and
// scheduler and for none of its users, so they are not redlock's public API:
// redlock's Lock embeds a Handle carrying them, and ReleaseAsync and
// LeaveToExpire below reach them through it.
type Mechanics interface {
	// ReleaseAsync is a release that returns before the nodes answer;
	// done, if not nil, gets its result on another goroutine.
	ReleaseAsync(ctx context.Context, done func(error))
	// LeaveToExpire ends the lock in this process and leaves its keys on
	// the nodes until their TTL, an end that is not a loss.
	LeaveToExpire() error
	// CompletedRun is the run of the completion record the acquisition
	// found (the largest where nodes differ), -1 for none.
	CompletedRun() int
	// CompletedAt is when the found record's work completed, on the nodes'
	// clock; the zero time for none.
	CompletedAt() time.Time
	// RecordCompletion has the release write the record with run (kept in
	// [0, 1023]); ForgetCompletion has it delete the record instead. Both
	// refuse a lock acquired without Completion or no longer held.
	RecordCompletion(run int) error
	ForgetCompletion() error
}

// MaxCompletionWindow bounds a completion record's window: records are kept
// on every lock node for their whole window (docs/guide/OPERATIONS.md).
const MaxCompletionWindow = 30 * 24 * time.Hour

// MaxLimit is the largest n redlock.WithLimit accepts (a TryAcquire of a
// full resource makes one round per slot) and the modulus of a slot's fence
// class (docs/design/REDLOCK.md, "Limits"): the middleware checks its limit
// against it where it is configured.
const MaxLimit = 1024

// Outcome names how an acquisition that returned err ended: "acquired",
// "locked", "quorum", "canceled" or "error", the asynqlock.outcome of
// redlock's acquire span and of the middleware's wait span. Set by redlock.
var Outcome func(err error) string

// Completion is redlock's lock option (a redlock.LockOption) that ties an
// acquisition to the unit of work id: its round also looks for the id's
// completion record on every node, and the release writes the record the
// holder asks for, kept for window (docs/guide/RELIABILITY.md, "Once"). Set
// by redlock; only the middleware writes records.
var Completion func(id string, window time.Duration) any

// Handle is embedded in redlock's Lock: its unexported method is promoted
// to the Lock, which no package but this one can call.
type Handle struct{ m Mechanics }

// NewHandle is the Handle of a lock whose mechanics are m.
func NewHandle(m Mechanics) Handle { return Handle{m: m} }

func (h *Handle) mechanics() Mechanics { return h.m }

// mechanical is a lock that embeds a Handle (*redlock.Lock, not nil).
type mechanical interface{ mechanics() Mechanics }

// ReleaseAsync releases l without waiting for the nodes' answers
// (redlock's lock documents when it sends the release itself); done, if not
// nil, gets the release's result. Close of l's client waits for it.
func ReleaseAsync(ctx context.Context, l mechanical, done func(error)) {
	l.mechanics().ReleaseAsync(ctx, done)
}

// LeaveToExpire ends l's life in this process without touching the nodes:
// its keys stay until their TTL, and the end of its validity is no loss.
func LeaveToExpire(l mechanical) error { return l.mechanics().LeaveToExpire() }

// MechanicsOf returns the mechanics of l, a lock acquired with Completion, for its
// record's calls.
func MechanicsOf(l mechanical) Mechanics { return l.mechanics() }

// LocalQueue, BatchWindow and OnHandOver are redlock Client options
// (redlock.Option, set by redlock) for this repository's tests and
// benchmarks (internal/locktest), which turn a mechanism on and off or watch
// it: callers of one Client queued in the process (default on), how long a
// node's worker may hold a call back to batch it (default 1ms or a quarter
// of the node timeout), and f called with each hand-over round's result.
var (
	LocalQueue  func(on bool) any
	BatchWindow func(d time.Duration) any
	OnHandOver  func(f func(error)) any
)
