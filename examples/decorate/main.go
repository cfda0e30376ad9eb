// Command decorate shows the lock middleware on several asynq handlers, each
// with its own key and conflict policy, and a rollback:
//
//   - stock:adjust is locked per SKU (a JSON field), waits for a busy SKU,
//     and rolls back a reservation when the adjustment fails;
//   - email:send is locked per payload (identical e-mails never go out
//     twice at once) and skips a duplicate that finds its twin running;
//   - report:build is locked per task type (one report at a time) and
//     requeues when another build runs.
//
// It runs on embedded in-process Redis servers and prints what happened.
//
//	go run ./examples/decorate
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
