// Package worker is a ready asynq worker process with per-resource Redlock
// locks: configuration from the environment, the asynq server with the lock
// middleware and its retry helpers wired, Prometheus metrics, health checks
// and graceful shutdown.
//
//	cfg, err := worker.LoadConfig() // every bad variable reported at once
//	if err != nil { log.Fatal(err) }
//	w, err := worker.New(cfg)
//	if err != nil { log.Fatal(err) }
//	w.Handle("stock:adjust", adjustHandler, middleware.ByField("sku"))
//	log.Fatal(w.Run(ctx)) // until ctx ends or SIGINT/SIGTERM
//
// The HTTP endpoint (METRICS_ADDR) serves /metrics, /healthz (the process is
// alive) and /readyz (200 only while the broker and a quorum of lock nodes
// answer). On shutdown the worker stops taking tasks, lets in-flight tasks
// finish within the shutdown timeout (asynq puts unfinished ones back in the
// queue), waits for their handlers to return so that their locks are
// released, then closes its connections.
package worker
