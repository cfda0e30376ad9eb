// Command cron-singleton runs three replicas of one robfig cron table, each
// with its own cron and lock client and the job wrapped as any robfig
// JobWrapper (cron.NewChain(scheduler.Singleton(locks, "heartbeat"))), and
// prints when each replica fired each tick and which one ran it: every tick
// runs once, although the replicas' crons deliver each tick at their own
// moments: on time, 700ms late and 300ms late (a loaded host, or a clock
// behind the lock nodes'), all within the default 1s skew.
//
// It uses embedded in-process lock nodes unless REDLOCK_NODES is set.
//
//	go run ./examples/cron-singleton [-ticks 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
)

func main() {
	ticks := flag.Int("ticks", 5, "ticks to run (one per second)")
	flag.Parse()
	if *ticks < 1 || *ticks > 60 {
		fmt.Fprintln(os.Stderr, "cron-singleton: -ticks must be in [1, 60]")
		os.Exit(2)
	}
	runs, err := run(context.Background(), *ticks, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cron-singleton:", err)
		os.Exit(1)
	}
	for _, n := range runs {
		if n > 1 {
			os.Exit(1) // a tick ran twice
		}
	}
}
