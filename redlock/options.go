package redlock

import (
	"log/slog"
	"math"
	"time"
)

// Defaults used when no option overrides them; each option's doc states its own.
const (
	defaultPrefix         = "asynqlock:"
	defaultNodeTimeout    = 50 * time.Millisecond
	defaultDriftFactor    = 0.01
	defaultRetryMin       = 25 * time.Millisecond
	defaultRetryMax       = 100 * time.Millisecond
	defaultFenceRetention = 7 * 24 * time.Hour
	defaultBatchWindow    = 100 * time.Microsecond
	// driftFloor is the fixed part of the clock-drift allowance (2ms in the
	// Redlock text).
	driftFloor = 2 * time.Millisecond
	// maxNodes bounds the node count so a round can track nodes in a bitmask.
	maxNodes = 64
)

type config struct {
	prefix         string
	nodeTimeout    time.Duration
	driftFactor    float64
	retryMin       time.Duration
	retryMax       time.Duration
	fenceRetention time.Duration
	localQueue     bool
	logger         *slog.Logger
	observer       func(Event)
	batchWorkers   int
	batchWindow    time.Duration
	holderInfo     bool
}

func defaultConfig() config {
	return config{
		prefix:         defaultPrefix,
		nodeTimeout:    defaultNodeTimeout,
		driftFactor:    defaultDriftFactor,
		retryMin:       defaultRetryMin,
		retryMax:       defaultRetryMax,
		fenceRetention: defaultFenceRetention,
		localQueue:     true,
		logger:         slog.Default(),
		batchWorkers:   1,
		batchWindow:    defaultBatchWindow,
		holderInfo:     true,
	}
}

func (c *config) validate() error {
	switch {
	case c.nodeTimeout <= 0:
		return invalidf("node timeout must be positive, got %v", c.nodeTimeout)
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return invalidf("drift factor must be in [0, 0.5), got %v", c.driftFactor)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return invalidf("retry delay range must satisfy 0 < min <= max, got [%v, %v]", c.retryMin, c.retryMax)
	case c.fenceRetention < time.Minute:
		return invalidf("fence retention must be at least a minute, got %v", c.fenceRetention)
	case c.batchWindow < 0 || c.batchWindow > c.nodeTimeout/4:
		return invalidf("batch window must be in [0, node timeout/4 = %v], got %v", c.nodeTimeout/4, c.batchWindow)
	}
	return nil
}

// Option configures a Client.
type Option func(*config)

// WithPrefix sets the prefix of every key and channel the client uses
// (default "asynqlock:"). Clients that must exclude each other need the same prefix.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithNodeTimeout bounds each call to one node (default 50ms). It must be
// small against the TTLs in use: a TTL must exceed it plus the drift allowance.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithDriftFactor sets the clock-drift allowance as a fraction of the TTL
// (default 0.01); 2ms are always added to it.
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithRetryDelay sets the range of the random delay between two attempts of
// Acquire (default 25ms–100ms). Waiters are normally woken by a release
// notification first; the delay is the fallback when a holder's key expires
// or a notification is missed.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// WithFenceRetention sets how long a resource's fencing counter is kept after
// its last fenced acquisition (default 7 days). Past it the counter restarts
// from the nodes' clock in microseconds, which stays above every earlier
// fence as long as node clocks differ by less than the retention.
func WithFenceRetention(d time.Duration) Option { return func(c *config) { c.fenceRetention = d } }

// withLocalQueue turns the in-process FIFO queue of Acquire waiters on or off
// (default on). With it, only the head of each resource's queue contends on
// the nodes, and a release hands the lock to the next local waiter at once.
// Safety never depends on it: the quorum decides. Tests and benchmarks reach
// it through internal/lockadmin.
func withLocalQueue(on bool) Option { return func(c *config) { c.localQueue = on } }

// withBatchWindow sets how long a node's worker may hold a call back to send
// it together with others (default 100µs; 0 sends every call at once); see
// docs/BATCHING.md. It must not exceed a quarter of the node timeout.
// Benchmarks reach it through internal/lockadmin.
func withBatchWindow(d time.Duration) Option { return func(c *config) { c.batchWindow = d } }

// WithLogger sets the structured logger. Node failures are logged at Warn
// once per change of state, with the node's address and the cause. Default:
// slog.Default(); nil means the default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.Default()
		}
		c.logger = l
	}
}

// WithObserver installs a hook called for acquisitions, extensions,
// releases, losses and node errors, e.g. to feed metrics. It is called
// synchronously on the lock's hot path: it must be fast and must not block.
// Default: none; nil means none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// lockConfig holds per-lock options.
type lockConfig struct {
	fencing bool
	maxHold time.Duration
	holder  string // WithHolder's name
	suffix  string // the holder part of this acquisition's tokens
}

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

// WithFencing makes the acquisition produce a fencing token (see Lock.Fence).
// It costs a script instead of a plain SET and, when the nodes' counters
// disagree or have not all answered, one more round trip.
//
// The guarantee: each fence handed out for a resource is larger than every
// fence handed out for it before, as long as (1) at most one node loses its
// data (a restart without persistence) between two fenced acquisitions of the
// resource, and (2) the resource is acquired with a fence at least once per
// fence retention (WithFenceRetention; past it, counters restart from the
// nodes' wall clocks, which must then differ by less than the retention).
// Node clocks may otherwise differ by any amount.
//
// To survive one node's data loss, a fence is issued only once N−q+2 nodes
// carry it, q being the quorum: all 3 of 3, 3 of 4, 4 of 5, 5 of 7. Then
// every later quorum includes a node that still carries it. The cost is
// availability: a fenced acquisition needs that many nodes to answer, one
// more than a quorum when N is odd (with 5 nodes it survives one failed node,
// not two; with 3, none). Short of it, the attempt is undone and fails with
// ErrQuorum, and Acquire retries until its context ends. Locks taken
// without WithFencing are not affected.
func WithFencing() LockOption { return func(c *lockConfig) { c.fencing = true } }

// WithMaxHold caps the total time KeepAlive keeps the lock: after d from the
// acquisition it stops extending, and the lock is lost (cause ErrMaxHold) when
// its validity ends. Zero means no cap.
func WithMaxHold(d time.Duration) LockOption { return func(c *lockConfig) { c.maxHold = d } }
