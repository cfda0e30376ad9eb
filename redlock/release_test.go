package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestReleaseReportsLockTakenOver: when fewer than a majority of nodes still
// hold the token at release (their data was lost), Release says the lock
// was lost instead of reporting a clean release.
func TestReleaseReportsLockTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, mems := memClient(t, 3, WithNodeTimeout(20*time.Millisecond))
		l, err := c.TryAcquire(context.Background(), "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		k := c.keysFor("r")
		for _, m := range mems[:2] {
			m.set(func(m *memNode) { delete(m.data, k.key) })
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release: %v, want ErrLockLost", err)
		}
	})
}
