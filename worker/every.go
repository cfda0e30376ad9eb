package worker

import (
	"context"
	"time"
)

// every calls f every d until ctx ends; the returned channel is closed when
// it stopped, so that nothing f does comes after.
func every(ctx context.Context, d time.Duration, f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return done
}
