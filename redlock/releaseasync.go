package redlock

import "context"

// releaseAsync is Release without the wait for the nodes' answers
// (lockutil.ReleaseAsync, the middleware's): it
// returns at once, and done, if not nil, gets Release's result on another
// goroutine once they answered. A caller that only reports the result (a
// job's middleware, after its handler) goes on with its next work
// meanwhile. When a caller of this Client waits for the resource, or did
// lately, the release (or the hand-over to that caller) is sent before it
// returns, so that the next holder's turn does not wait for a goroutine to
// be scheduled; otherwise that goroutine sends it, which cost the process
// less CPU per task through asynq (docs/design/BATCHING.md). Close waits for the
// releases started before it, so that none is dropped and leaves its keys
// for a TTL; one started after Close runs as Release does then. A nil Lock
// reports ErrNotHeld to done at once.
func (l *Lock) releaseAsync(ctx context.Context, done func(error)) {
	if l == nil {
		report(done, ErrNotHeld)
		return
	}
	c := l.c
	c.bgMu.Lock()
	if ctx == nil || c.closing {
		c.bgMu.Unlock()
		report(done, l.Release(ctx))
		return
	}
	c.releasing.Add(1)
	c.bgMu.Unlock()
	if !l.turn.waited() && !c.notify.watched(l.res.channel) {
		go func() {
			defer c.releasing.Done()
			report(done, l.Release(ctx))
		}()
		return
	}
	span := c.startSpan(ctx, spanRelease, l.res.resource)
	end := func(err error) {
		defer c.releasing.Done()
		endReleaseSpan(span, err)
		report(done, err)
	}
	p, err := l.startRelease(ctx)
	if p.r == nil { // handed over, or not held
		end(err)
		return
	}
	go func() { end(p.finish(ctx)) }()
}

// report passes err to done, if there is one.
func report(done func(error), err error) {
	if done != nil {
		done(err)
	}
}
