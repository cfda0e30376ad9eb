// Command limit shows per-key concurrency limits: tenants' imports, at
// most 3 at once per tenant across every worker, however many workers
// there are (middleware.WithLimit, redlock.WithLimit). Two asynq servers
// stand for two worker processes; each import takes a moment, and the
// program prints how many imports of each tenant ran at most at once.
//
// It runs on embedded in-process Redis servers.
//
//	go run ./examples/limit
package main

import (
	"context"
	"log"
	"os"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}
