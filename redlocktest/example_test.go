package redlocktest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
)

// In a test, redlocktest.NewClient(t) does all of this and closes
// everything when the test ends.
func ExampleStartNodes() {
	urls, stop, err := redlocktest.StartNodes(redlocktest.Nodes)
	if err != nil {
		panic(err)
	}
	defer stop()
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx := context.Background()
	err = locks.Run(ctx, "sku-42", 10*time.Second, func(ctx context.Context) error {
		_, err := locks.TryAcquire(ctx, "sku-42", 10*time.Second)
		fmt.Println("a second holder:", err != nil)
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// a second holder: true
	// run: <nil>
}
