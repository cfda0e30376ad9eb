package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
)

// Run serves until ctx ends or the process gets SIGINT or SIGTERM, then
// shuts down gracefully and closes the worker's connections. It returns nil
// on such a requested shutdown (exit 0), and an error only when the worker
// cannot serve (exit 1).
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer w.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	ep, err := w.listen()
	if err != nil {
		return err
	}
	srv := w.newServer()
	nodeCheckDone, err := w.startNodeCheck(ctx)
	if err != nil {
		ep.close()
		return err
	}
	w.checkReady(ctx)
	if err := errors.Join(w.brokerMisconfigured(), w.brokerPasswordUnused(ctx)); err != nil {
		ep.close()
		return fmt.Errorf("worker: refusing to start: %w", err)
	}
	w.warnFewNodes()
	if err := srv.Start(w.mux); err != nil {
		ep.close()
		return fmt.Errorf("worker: start asynq server: %w", err)
	}
	w.startCrons()
	w.log.Info("worker started", "concurrency", w.cfg.Concurrency, "wait_room", w.cfg.waitRoom(), "queues", w.cfg.Queues, "lock_nodes", len(w.cfg.RedlockNodes), "metrics", w.Addr(), "trace_export", cmp.Or(w.tracesTo, "off"))
	w.health.logStartReadiness()
	probeDone := w.startProbes(ctx)

	<-ctx.Done()
	<-nodeCheckDone // it ends with ctx
	stop()          // a second SIGINT/SIGTERM now ends the process at once
	w.log.Info("worker shutting down", "timeout", w.cfg.ShutdownTimeout)
	<-probeDone // no probe may flip readiness back on
	w.shutdown(srv)
	ep.shutdown()
	w.log.Info("worker stopped")
	return nil
}

// newServer is the asynq server for the configuration (serverConfig).
func (w *Worker) newServer() *asynq.Server {
	lvl, _ := parseLevel(w.cfg.LogLevel)
	return asynq.NewServer(w.broker, w.serverConfig(asynqLevel(lvl)))
}

// shutdown turns readiness off, stops the hosted schedulers and the asynq
// server, and waits for the handlers still running, all within about the
// shutdown timeout.
func (w *Worker) shutdown(srv *asynq.Server) {
	w.stopping.Store(true)
	w.ready.Store(false)
	boolGauge(w.metrics.ready, false)
	start := time.Now()
	w.stopCrons(w.cfg.ShutdownTimeout)
	srv.Shutdown() // stops taking tasks; unfinished ones go back to the queue
	// Handlers asynq stopped waiting for get what is left of the timeout
	// (at least a second), so the whole shutdown stays near it.
	w.waitHandlers(max(w.cfg.ShutdownTimeout-time.Since(start), time.Second))
}

// waitHandlers waits, at most d, for handlers asynq stopped waiting for:
// their locks are released when they return.
func (w *Worker) waitHandlers(d time.Duration) {
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		w.log.Warn("handlers still running after the shutdown timeout; their locks expire at their TTL")
	}
}
