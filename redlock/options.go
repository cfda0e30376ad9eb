package redlock

import (
	"log/slog"
	"math"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"go.opentelemetry.io/otel/trace"
)

// Defaults read beyond defaultConfig; each option's doc states its own.
const (
	defaultPrefix      = "asynqlock:"
	defaultNodeTimeout = 50 * time.Millisecond
	defaultDriftFactor = 0.01
	defaultBatchWindow = time.Millisecond
	driftFloor         = 2 * time.Millisecond // the fixed part of the drift allowance (the Redlock text's)
	maxNodes           = 64                   // a round tracks its nodes in a bitmask
)

type config struct {
	prefix         string
	nodeTimeout    time.Duration
	driftFactor    float64
	retryMin       time.Duration
	retryMax       time.Duration
	localQueue     bool
	noSlotQueue    bool        // tests only: slot waiters do not queue on the nodes (the control of the FIFO tests)
	slotRound      func()      // tests only: runs before each of a slot waiter's tries (nil: none)
	onHandOver     func(error) // tests only: the result of each hand-over round (nil: none)
	logger         *slog.Logger
	observer       func(Event)
	batchWindow    time.Duration
	windowSet      bool // withBatchWindow was given; else the default, fitted to the node timeout
	holderInfo     bool
	tracerProvider trace.TracerProvider // nil: the global provider
	inspectOnly    bool                 // NewFromURLs keeps nodes it would refuse (the operator's check)
}

func defaultConfig() config {
	return config{
		prefix:      defaultPrefix,
		nodeTimeout: defaultNodeTimeout,
		driftFactor: defaultDriftFactor,
		retryMin:    25 * time.Millisecond,
		retryMax:    100 * time.Millisecond,
		localQueue:  true,
		logger:      slog.Default(),
		batchWindow: defaultBatchWindow,
		holderInfo:  true,
	}
}

// configure is the configuration opts make, validated.
func configure(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return cfg, invalidf("nil option")
		}
		o(&cfg)
	}
	return cfg, cfg.validate()
}

func (c *config) validate() error {
	if !c.windowSet {
		c.batchWindow = min(defaultBatchWindow, c.nodeTimeout/4)
	}
	switch {
	case c.nodeTimeout <= 0:
		return invalidf("node timeout must be positive, got %v", c.nodeTimeout)
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 0.5:
		return invalidf("drift factor must be in [0, 0.5), got %v", c.driftFactor)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return invalidf("retry delay range must satisfy 0 < min <= max, got [%v, %v]", c.retryMin, c.retryMax)
	case c.batchWindow < 0 || c.batchWindow > c.nodeTimeout/4:
		return invalidf("batch window must be in [0, node timeout/4 = %v], got %v", c.nodeTimeout/4, c.batchWindow)
	}
	return nil
}

// Option configures a Client.
type Option func(*config)

// WithPrefix sets the prefix of every key and channel the client uses.
// Clients that must exclude each other need the same prefix. Default:
// "asynqlock:".
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithNodeTimeout bounds each call to one node. It must be small against the
// TTLs in use: a TTL must exceed it plus the drift allowance. Default: 50ms.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithDriftFactor sets the clock-drift allowance as a fraction of the TTL;
// 2ms are always added to it. Default: 0.01.
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithRetryDelay sets the range of the random delay between two attempts of
// Acquire. Waiters are normally woken by a release notification first; the
// delay is the fallback when a holder's key expires or a notification is
// missed. Default: 25ms to 100ms.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// withBatchWindow (lockutil.BatchWindow) sets how long a node's worker may
// hold a call back to batch it (docs/design/BATCHING.md); 0 sends at once.
func withBatchWindow(d time.Duration) Option {
	return func(c *config) { c.batchWindow, c.windowSet = d, true }
}

// withHandOverHook (lockutil.OnHandOver) calls f with each hand-over
// round's result.
func withHandOverHook(f func(error)) Option { return func(c *config) { c.onHandOver = f } }

// init gives lockutil redlock's mechanics for this module's other packages,
// tests and benchmarks. Off, LocalQueue has every caller contend on the
// nodes by itself, as callers in separate processes do
// (docs/design/HANDOVER.md); safety never depends on it.
func init() {
	lockutil.LocalQueue = func(on bool) any { return Option(func(c *config) { c.localQueue = on }) }
	lockutil.BatchWindow = func(d time.Duration) any { return withBatchWindow(d) }
	lockutil.OnHandOver = func(f func(error)) any { return withHandOverHook(f) }
	lockutil.Completion = func(id string, window time.Duration) any { return withCompletion(id, window) }
	lockutil.Outcome = outcomeOf
}

// WithInspectOnly makes NewFromURLs keep the nodes it would refuse (one
// server reached twice, a misconfigured node) instead of failing, for a tool
// that reports them (`asynqlock check`). Default: refused. Do not lock with
// such a client: its nodes may not be independent.
func WithInspectOnly() Option { return func(c *config) { c.inspectOnly = true } }

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

// WithObserver installs a hook called for acquisitions, extensions, losses
// and node errors (EventKind), e.g. to feed metrics. It is called on the
// lock's hot path: it must be fast and must not block. Default: none.
func WithObserver(f func(Event)) Option { return func(c *config) { c.observer = f } }

// lockConfig holds per-lock options.
type lockConfig struct {
	fencing bool
	slot    uint16            // under WithLimit: the slot the current round asks for
	limit   int32             // WithLimit's n, clamped to [MinInt32, maxLimit+1]; 1 when not given
	suffix  string            // the holder part of this acquisition's tokens
	rec     *completionRecord // withCompletion's record
}

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

// WithFencing makes the acquisition produce a fencing token (see Lock.Fence)
// that is larger than every fence handed out for the resource before, as
// long as at most one node loses its data between two fenced acquisitions
// and the resource is fenced at least once in 7 days (docs/design/REDLOCK.md,
// "The fencing guarantee"). It costs a script instead of a plain SET, one more
// round trip when the nodes' counters disagree, and N−q+2 nodes that answer
// (4 of 5), else ErrQuorum. Default: no fence.
func WithFencing() LockOption { return func(c *lockConfig) { c.fencing = true } }
