package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// KeepAlive extends a held lock until the work is done; the context it
// returns is cancelled with cause ErrLockLost if the lock can no longer be
// proven held, so the work stops before another holder can start.
func ExampleLock_KeepAlive() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run on loaded machines
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Acquire(ctx, "export:monthly", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	work, cancel := lock.KeepAlive(ctx)
	defer cancel()

	select {
	case <-time.After(100 * time.Millisecond): // the work
		fmt.Println("work done while the lock was held")
	case <-work.Done():
		fmt.Println("stopped:", errors.Is(context.Cause(work), redlock.ErrLockLost))
	}
	// Output: work done while the lock was held
}
