package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
)

// TestNewClientLocksAndExpires: the client's nodes exclude a second holder,
// expire an unreleased lock at its TTL in real time, and a later option
// overrides the default node timeout.
func TestNewClientLocksAndExpires(t *testing.T) {
	c := redlocktest.NewClient(t, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.TryAcquire(ctx, "sku-1", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "sku-1", 2*time.Second); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want ErrLocked", err)
	}
	// Never released: Acquire gets it once the TTL ran out on the nodes.
	again, err := c.Acquire(ctx, "sku-1", 2*time.Second)
	if err != nil {
		t.Fatalf("Acquire after the holder's TTL: %v", err)
	}
	if !time.Now().After(l.Until()) {
		t.Errorf("acquired again at %v, before the first lock's validity ended at %v", time.Now(), l.Until())
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
