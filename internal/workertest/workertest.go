// Package workertest runs a worker (worker.Worker) inside a test.
package workertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Worker is what Run needs of a worker.Worker (an interface, so that the
// worker package's own tests can use it without an import cycle).
type Worker interface {
	Run(ctx context.Context) error
	Addr() string
}

// Run runs w until the test ends or stop is called, and returns once w's
// HTTP endpoint listens (the worker's config must set METRICS_ADDR). stop
// cancels Run and returns its error, or an error if Run does not return
// within 30s; the test's cleanup reports that error.
func Run(tb testing.TB, w Worker) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	returned := false
	collect := func(d time.Duration) {
		if returned {
			return
		}
		select {
		case err = <-done:
			returned = true
		case <-time.After(d):
		}
	}
	stop = func() error {
		once.Do(func() {
			cancel()
			collect(30 * time.Second)
			if !returned {
				err = errors.New("worker: Run did not return within 30s of cancellation")
			}
		})
		return err
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Error(err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for w.Addr() == "" {
		if collect(0); returned {
			tb.Fatalf("worker: Run returned before listening: %v", err)
		}
		if time.Now().After(deadline) {
			tb.Fatal("worker never listened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stop
}
