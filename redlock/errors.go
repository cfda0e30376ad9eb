package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Test for them with errors.Is; an error may match several
// (a failed Acquire matches the context error and the last attempt's cause).
var (
	// ErrLocked means another holder owns the resource on enough nodes that
	// this attempt could not reach a quorum.
	ErrLocked = errors.New("redlock: resource is locked by another holder")
	// ErrQuorum means too many nodes failed to answer (errors or timeouts)
	// for a quorum to be possible, or the answers came too late to leave any
	// validity.
	ErrQuorum = errors.New("redlock: quorum not reached")
	// ErrLockLost means a lock could no longer be proven held within its
	// validity: keep-alive failed, its keys vanished, or Until passed.
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrNotHeld means the lock was already released.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrInvalid marks bad input: an empty resource, a bad TTL, bad nodes or
	// options (in packages scheduler and gocronlock: a bad job, name, spec or
	// option). The message names what is wrong.
	ErrInvalid = errors.New("redlock: invalid argument")
	// errClosed ends the calls of a closed Client: it matches go-redis's
	// redis.ErrClosed, as a closed go-redis client's calls do.
	errClosed = fmt.Errorf("redlock: client closed (%w)", redis.ErrClosed)
)

// NodeError is the failure of one node during an operation. Reach it with
// errors.As on any error returned by this package.
type NodeError struct {
	Node int    // index of the node in the list given to New
	Addr string // the node's address, never its credentials
	Op   string // "acquire", "extend", "release", "inspect", "fence"
	Err  error  // the cause (a network error, a timeout, a Redis error)
}

// Error implements error.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: node %d (%s) %s: %v", e.Node, e.Addr, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// opError is the error of an operation that did not reach its quorum.
type opError struct {
	kinds   []error // ErrLocked, ErrQuorum, ErrLockLost
	summary string
	nodes   []error       // each node's *NodeError
	split   bool          // an acquire that won some nodes but no quorum
	took    time.Duration // how long the attempt took
}

func (e *opError) Error() string {
	var b strings.Builder
	for i, k := range e.kinds {
		s := k.Error()
		if i > 0 {
			s = " and " + strings.TrimPrefix(s, "redlock: ")
		}
		b.WriteString(s)
	}
	if e.summary != "" {
		b.WriteString(": " + e.summary)
	}
	for _, n := range e.nodes {
		b.WriteString("; " + n.Error())
	}
	return b.String()
}

func (e *opError) Unwrap() []error { return slices.Concat(e.kinds, e.nodes) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
