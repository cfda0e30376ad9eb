// Command cron-singleton runs three replicas of one cron table, each with
// its own scheduler and lock client, and prints which replica ran each tick:
// every tick runs once, although every replica fires it (one of them 300ms
// late, as a replica with a lagging clock would).
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
		if n != 1 {
			os.Exit(1)
		}
	}
}
