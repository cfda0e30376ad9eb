package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
)

// nodes starts n redis-servers for the examples; in production
// these are independent redis-server masters too.
func nodes(n int) (urls []string, stop func()) {
	urls, stop, err := redistest.Servers(n)
	if err != nil {
		log.Fatal(err)
	}
	return urls, stop
}

// Run holds a lock on a resource for the duration of a function, keeping it
// alive and releasing it afterwards.
func Example() {
	urls, stop := nodes(3)
	defer stop()

	// e.g. redis://:password@redis-a:6379/0, rediss:// for TLS. The node
	// timeout (default 50ms) is generous here: examples run as tests on
	// loaded machines.
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Run(context.Background(), "invoice:42", 10*time.Second, func(ctx context.Context) error {
		// ctx is cancelled with cause redlock.ErrLockLost if the lock is lost.
		fmt.Println("only one process in the fleet runs this at a time")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: only one process in the fleet runs this at a time
}

// TryAcquire makes one attempt and tells a held resource apart from
// failing nodes.
func ExampleClient_TryAcquire() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.TryAcquire(ctx, "report:daily", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	_, err = client.TryAcquire(ctx, "report:daily", 30*time.Second)
	switch {
	case errors.Is(err, redlock.ErrLocked):
		fmt.Println("someone else is running the report")
	case errors.Is(err, redlock.ErrQuorum):
		fmt.Println("lock nodes unavailable")
	}
	// Output: someone else is running the report
}

// Acquire waits for the lock (woken as soon as the holder releases) for as
// long as the context allows; KeepAlive extends it while the work runs.
func ExampleClient_Acquire() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := client.Acquire(ctx, "sku:A-100", 8*time.Second)
	if err != nil {
		log.Fatal(err) // wraps ctx's error and the last cause (ErrLocked, ErrQuorum)
	}
	work, stopKeepAlive := lock.KeepAlive(ctx)
	defer stopKeepAlive()

	select {
	case <-work.Done():
		fmt.Println("stopped:", context.Cause(work))
	default:
		fmt.Println("holding", lock.Resource(), "until", lock.Until().After(time.Now()))
	}
	if err := lock.Release(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Output: holding sku:A-100 until true
}

// WithFencing gives every acquisition a number that grows: storage that
// remembers the largest fence it accepted rejects a stale holder's write.
func ExampleWithFencing() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	first, err := client.TryAcquire(ctx, "ledger", 10*time.Second, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	_ = first.Release(ctx)
	second, err := client.TryAcquire(ctx, "ledger", 10*time.Second, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("fence grows:", second.Fence() > first.Fence())
	// Output: fence grows: true
}
