package redlock

import "context"

// releaseAsync is Release without the wait for the nodes' answers
// (lockutil.ReleaseAsync, the middleware's): done, if not nil, gets its
// result on another goroutine. The release (or hand-over) is sent before it
// returns when a caller of this Client waits for the resource or did lately,
// else from that goroutine (docs/design/BATCHING.md). Close waits for the
// releases started before it, so that none leaves its keys for a TTL; one
// started after Close runs as Release does. A nil Lock reports ErrNotHeld.
func (l *Lock) releaseAsync(ctx context.Context, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	if l == nil {
		done(ErrNotHeld)
		return
	}
	c := l.c
	c.bgMu.Lock()
	if ctx == nil || c.closing {
		c.bgMu.Unlock()
		done(l.Release(ctx))
		return
	}
	c.releasing.Add(1)
	c.bgMu.Unlock()
	if !l.turn.waited() && !c.notify.watched(l.res.channel) {
		go func() {
			defer c.releasing.Done()
			done(l.Release(ctx))
		}()
		return
	}
	span := c.startSpan(ctx, spanRelease, l.res.resource)
	end := func(err error) {
		defer c.releasing.Done()
		endReleaseSpan(span, err)
		done(err)
	}
	p, err := l.startRelease(ctx)
	if p.r == nil { // handed over, or not held
		end(err)
		return
	}
	go func() { end(l.finishRelease(ctx, p)) }()
}
