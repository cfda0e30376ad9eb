package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// WithHolder names what holds a lock; List finds held locks with their
// holders, and ForceRelease breaks one (only the token that was seen).
func ExampleClient_List() {
	urls, stop := nodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	if _, err := client.TryAcquire(ctx, "report:daily", time.Minute, redlock.WithHolder("job nightly-report")); err != nil {
		log.Fatal(err)
	}

	listing, err := client.List(ctx, "report:", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range listing.Locks {
		for _, c := range redlock.Claims(l.Nodes) {
			fmt.Printf("%s held by %q on %d of %d nodes\n", l.Resource, c.Holder.Name, len(c.Nodes), client.Nodes())
			n, err := client.ForceRelease(ctx, l.Resource, c.Token)
			fmt.Println("force-released on", n, "nodes, err:", err)
		}
	}
	// Output:
	// report:daily held by "job nightly-report" on 3 of 3 nodes
	// force-released on 3 nodes, err: <nil>
}
