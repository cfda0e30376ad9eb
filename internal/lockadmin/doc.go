// Package lockadmin holds the operator's side of redlock that the module's
// own tools need (cmd/asynqlock, the worker's health checks and /locks page)
// and library users do not: listing held locks, breaking one, pinging the
// nodes, and judging the reports of redlock.Client.Check (same server twice,
// clocks apart). It also gives tests and benchmarks the client's tuning
// knobs that are not options of the public API.
package lockadmin
