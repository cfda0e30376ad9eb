// Package worker is a ready asynq worker process with per-resource Redlock
// locks: configuration from the environment, the asynq server with the lock
// middleware and its retry helpers wired, Prometheus metrics, health checks
// and graceful shutdown.
//
//	func run(ctx context.Context) error {
//		cfg, err := worker.LoadConfig() // every bad variable reported at once
//		if err != nil {
//			return err
//		}
//		w, err := worker.New(cfg)
//		if err != nil {
//			return err
//		}
//		defer w.Close()
//		if err := w.Handle("stock:adjust", adjust, middleware.ByField("sku")); err != nil {
//			return err
//		}
//		return w.Run(ctx) // nil after SIGINT/SIGTERM: exit 0; an error: exit 1
//	}
//
// Config lists the variables and their defaults. Handle locks each task of a
// type on the resource its key names, with the configured TTL and conflict
// policy; Scheduler hosts cron jobs on the same lock client; Client enqueues.
//
// The HTTP endpoint (METRICS_ADDR) serves /metrics (Registry), /healthz,
// /readyz (200 only while the broker and a quorum of lock nodes answer; its
// body names what is down) and /locks (held locks, holders, parked tasks).
// Every probe's failures are logged at Warn with address and cause, once per
// change of state. On shutdown the worker stops taking tasks, lets in-flight
// tasks finish within WORKER_SHUTDOWN_TIMEOUT (asynq puts unfinished ones
// back in the queue) and waits for their handlers, so that their locks are
// released, before it closes its connections.
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set, the worker exports traces over OTLP/HTTP, configured by the standard
// OTEL_* variables: a span asynq.task per task (TraceTasks) with
// the lock's spans and events under it, and a span per cron tick. Without
// it nothing is installed; the spans go to the global provider once the
// application sets one.
package worker
