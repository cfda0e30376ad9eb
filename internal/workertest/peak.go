package workertest

import (
	"context"
	"sync/atomic"
	"time"
)

// Peak is the largest value a sampled quantity was seen at (for instance
// the tasks waiting under a middleware.WaitCap); safe for concurrent use.
type Peak struct{ v atomic.Int64 }

// Sample reads read every d and keeps the largest value, until ctx ends or
// limit passes; run it in a goroutine of its own.
func (p *Peak) Sample(ctx context.Context, d, limit time.Duration, read func() int) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.See(int64(read()))
		}
	}
}

// See keeps n if it is the largest seen.
func (p *Peak) See(n int64) {
	for old := p.v.Load(); n > old && !p.v.CompareAndSwap(old, n); old = p.v.Load() {
	}
}

// Load returns the largest value seen.
func (p *Peak) Load() int64 { return p.v.Load() }

// Reset forgets what was seen.
func (p *Peak) Reset() { p.v.Store(0) }
