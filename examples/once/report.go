package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
)

// report prints each SKU's expected and actual stock and what happened to
// the deliveries asynq repeated.
func report(ctx context.Context, store *redis.Client, rs *replicas, skus []string, expected map[string]int64, took time.Duration, out io.Writer) (result, error) {
	res := result{tasks: rs.cfg.tasks}
	_, res.again = rs.h.tally()
	skipped, err := rs.skipped()
	if err != nil {
		return res, err
	}
	res.skipped = skipped
	fmt.Fprintf(out, "\n%-6s %9s %7s %5s\n", "SKU", "expected", "actual", "diff")
	for _, s := range skus {
		got, err := store.Get(ctx, "stock:"+s).Int64()
		if err != nil {
			return res, fmt.Errorf("stock store: %w", err)
		}
		want := initialStock + expected[s]
		if got != want {
			res.skusOff++
		}
		res.off += max(got-want, want-got)
		fmt.Fprintf(out, "%-6s %9d %7d %+5d\n", s, want, got, got-want)
	}
	fmt.Fprintf(out, "\nasynq delivered %d tasks again: %d skipped by their completion record (asynqlock_task_redeliveries_skipped_total), %d ran the handler again\n",
		res.redelivered(), res.skipped, res.again)
	switch {
	case res.redelivered() == 0:
		fmt.Fprintln(out, "no completion was missed, so this run shows nothing: run it again")
	case res.skusOff == 0:
		fmt.Fprintf(out, "every SKU exact: 0 updates applied twice\n")
	default:
		fmt.Fprintf(out, "%d SKUs wrong: %d units applied twice\n", res.skusOff, res.off)
	}
	fmt.Fprintf(out, "%d tasks in %v, the whole run (most of it asynq's wait for the leases of the missed tasks)\n", res.tasks, took.Round(100*time.Millisecond))
	return res, nil
}
