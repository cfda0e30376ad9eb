package middleware

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestRetryDelayOfARecoveredTaskIsShort: a task asynq's recoverer took back
// from a crashed worker comes back within a second, whatever its retry count,
// instead of asynq's default backoff (15s or more) on top of the minute the
// recoverer already took.
func TestRetryDelayOfARecoveredTaskIsShort(t *testing.T) {
	task := asynq.NewTask("stock:adjust", []byte(`{"sku":"A"}`))
	for _, err := range []error{asynq.ErrLeaseExpired, fmt.Errorf("wrapped: %w", asynq.ErrLeaseExpired)} {
		for n := range 26 { // asynq's default retry budget is 25
			for range 20 {
				if d := RetryDelay(n, err, task); d < leaseExpiredDelayMin || d >= leaseExpiredDelayMax {
					t.Fatalf("RetryDelay(%d, %v) = %v, want in [%v, %v)", n, err, d, leaseExpiredDelayMin, leaseExpiredDelayMax)
				}
			}
		}
	}
	if !IsFailure(asynq.ErrLeaseExpired) {
		t.Error("a crash must consume the retry budget, so a task that crashes every worker ends in the archive")
	}
}

// TestRetryDelayOfAFailureIsAsynqDefault: a handler's own error keeps asynq's
// backoff (at least 15s on the first retry, growing with n).
func TestRetryDelayOfAFailureIsAsynqDefault(t *testing.T) {
	task := asynq.NewTask("stock:adjust", nil)
	err := errors.New("store unavailable")
	for range 20 {
		if d := RetryDelay(0, err, task); d < 15*time.Second || d >= 45*time.Second {
			t.Fatalf("RetryDelay(0, %v) = %v, want asynq's default 15s-44s", err, d)
		}
	}
	if d := RetryDelay(5, err, task); d < 625*time.Second {
		t.Fatalf("RetryDelay(5, %v) = %v, want asynq's default of at least 5^4 s", err, d)
	}
}

func TestJitterStaysInRange(t *testing.T) {
	for range 1000 {
		if d := jitter(time.Millisecond, 2*time.Millisecond); d < time.Millisecond || d >= 2*time.Millisecond {
			t.Fatalf("jitter = %v", d)
		}
	}
}
