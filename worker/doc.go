// Package worker is a ready asynq worker process with per-resource Redlock
// locks: configuration from the environment, the asynq server with the lock
// middleware and its retry helpers wired, Prometheus metrics, health checks
// and graceful shutdown.
//
//	func main() {
//		if err := run(context.Background()); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1) // a failure
//		}
//	} // a requested shutdown (SIGINT/SIGTERM) returns nil: exit code 0
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
//		if err := w.Handle("stock:adjust", adjustHandler, middleware.ByField("sku")); err != nil {
//			return err
//		}
//		return w.Run(ctx) // until ctx ends or SIGINT/SIGTERM
//	}
//
// The HTTP endpoint (METRICS_ADDR) serves /metrics, /healthz (the process is
// alive) and /readyz (200 only while the broker and a quorum of lock nodes
// answer; its body names what is down). Every probe's failures are logged at
// Warn with address and cause, once per change of state.
//
// On shutdown the worker stops taking tasks, lets in-flight tasks finish
// within the shutdown timeout (asynq puts unfinished ones back in the queue),
// waits for their handlers to return so that their locks are released, then
// closes its connections.
package worker
