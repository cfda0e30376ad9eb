// Command tracing shows the spans of a hot SKU's tasks: four stock
// adjustments of one SKU arrive at once and run one at a time under the lock
// middleware; the program prints the span trees (names, durations,
// attributes and events) of one of them as an OpenTelemetry SDK recorded
// them: a task that was parked, when one was, each of its runs a trace
// (asynq carries no trace context from one run to the next). With -all it
// prints every run's tree.
//
// It runs on embedded in-process Redis servers with an in-memory span
// exporter; a real program installs an OTLP exporter instead (the worker
// package does when OTEL_EXPORTER_OTLP_ENDPOINT is set).
//
//	go run ./examples/tracing
//	go run ./examples/tracing -all
package main

import (
	"context"
	"flag"
	"log"
	"os"
)

func main() {
	all := flag.Bool("all", false, "print the span tree of every run of every task")
	flag.Parse()
	spans, err := run(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	printRuns(os.Stdout, spans, *all)
}
