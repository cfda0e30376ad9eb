package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// WithHolder names what holds a lock; Inspect shows, node by node, the token
// that holds a resource and who it names.
func ExampleClient_Inspect() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run on loaded machines
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.TryAcquire(redlock.ContextWithHolder(ctx, "job nightly-report"), "report:daily", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	states, err := client.Inspect(ctx, "report:daily")
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range states {
		fmt.Printf("node %d: held %v by %q, this lock's token: %v\n", s.Node, s.Token != "", s.Holder.Name, s.Token == lock.Token())
	}
	// Output:
	// node 0: held true by "job nightly-report", this lock's token: true
	// node 1: held true by "job nightly-report", this lock's token: true
	// node 2: held true by "job nightly-report", this lock's token: true
}
