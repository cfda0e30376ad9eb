package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockadmin"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	queuemetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// Worker is an asynq server whose handlers hold per-resource locks.
type Worker struct {
	nodes          nodeCheck     // lock nodes' identity and settings (nodecheck.go)
	nodeCheckEvery time.Duration // WithNodeCheckInterval
	parked         ParkedReader  // WithParkedReader, for the /locks page

	cfg       Config
	log       *slog.Logger
	locks     *redlock.Client
	broker    asynq.RedisConnOpt
	client    *asynq.Client
	inspector *asynq.Inspector
	ping      redis.UniversalClient // broker readiness probe
	mux       *asynq.ServeMux
	reg       *prometheus.Registry
	metrics   *metrics
	mwOpts    []middleware.Option
	probe     time.Duration

	brokerAddr string // the broker's address(es), never its credentials
	health     health
	ready      atomic.Bool
	stopping   atomic.Bool
	inflight   sync.WaitGroup
	closeOnce  sync.Once
	addr       atomic.Value // string: the HTTP endpoint's address once listening
	running    atomic.Bool
	crons      *crons // hosted cron schedulers, made on first use
	cronOnce   sync.Once
}

// Option configures a Worker beyond its Config.
type Option func(*Worker)

// WithLogger replaces the logger built from LOG_LEVEL and LOG_FORMAT. The
// worker's logger also receives asynq's lines and go-redis's (go-redis has
// one logger per process: New sets it). Without this option New also makes
// the built logger slog's default, so that lines written with the log
// package join the same stream.
func WithLogger(l *slog.Logger) Option { return func(w *Worker) { w.log = l } }

// WithMiddlewareOptions adds options to every locked handler's middleware
// (e.g. middleware.WithLockOptions(redlock.WithFencing())); options given to Handle come after them.
func WithMiddlewareOptions(opts ...middleware.Option) Option {
	return func(w *Worker) { w.mwOpts = append(w.mwOpts, opts...) }
}

// WithReadinessInterval sets how often readiness is probed (default 1s).
func WithReadinessInterval(d time.Duration) Option { return func(w *Worker) { w.probe = d } }

// policy turns the configured conflict policy into the middleware's.
func (c *Config) policy() (middleware.Policy, error) {
	switch c.ConflictPolicy {
	case "wait":
		return middleware.Wait(c.ConflictWait), nil
	case "requeue":
		return middleware.Requeue(), nil
	case "skip":
		return middleware.Skip(), nil
	case "fail":
		return middleware.Fail(), nil
	}
	return middleware.Policy{}, fmt.Errorf("must be wait, requeue, skip or fail, got %q", c.ConflictPolicy)
}

// New builds a worker from cfg: it connects nothing yet beyond creating
// clients; Run starts serving. Register handlers with Handle before Run.
func New(cfg Config, opts ...Option) (*Worker, error) {
	if ps := cfg.check(); len(ps) > 0 {
		return nil, &ConfigError{Problems: ps}
	}
	b, _ := parseBroker(cfg.AsynqRedisURL, cfg.asynqTLS())
	broker := b.opt
	w := &Worker{cfg: cfg, broker: broker, brokerAddr: b.addr, mux: asynq.NewServeMux(), reg: prometheus.NewRegistry(), probe: time.Second}
	for _, o := range opts {
		o(w)
	}
	if w.log == nil {
		w.log = newLogger(cfg, os.Stderr)
		// Lines written with the log package (asynq's queue metrics
		// collector) join the configured stream too.
		slog.SetDefault(w.log)
	}
	redis.SetLogger(redisLogger{w.log})
	w.metrics = newMetrics(w.reg)
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	locks, err := NewLockClient(cfg, redlock.WithLogger(w.log),
		redlock.WithObserver(w.metrics.observeLock))
	if err != nil {
		return nil, err
	}
	w.locks = locks
	w.client = asynq.NewClient(broker)
	w.inspector = asynq.NewInspector(broker)
	w.ping = probeClient(broker)
	if w.parked == nil {
		w.parked = newBrokerParked(w.ping, cfg.Queues)
	}
	w.reg.MustRegister(queuemetrics.NewQueueMetricsCollector(w.inspector))
	return w, nil
}

// Handle registers h for taskType, each task locked on the resource named by
// key (see the middleware package). A nil key runs the handler unlocked.
func (w *Worker) Handle(taskType string, h asynq.Handler, key middleware.KeyFunc, opts ...middleware.Option) error {
	if taskType == "" || h == nil {
		return fmt.Errorf("worker: Handle needs a task type and a handler (got %q, %v)", taskType, h)
	}
	if w.running.Load() {
		return errors.New("worker: Handle called after Run")
	}
	if key != nil {
		policy, _ := w.cfg.policy()
		all := append([]middleware.Option{
			middleware.WithTTL(w.cfg.LockTTL),
			middleware.WithPolicy(policy),
			middleware.WithBroker(w.ping),
			middleware.WithMaxWaiters(max(1, w.cfg.Concurrency/2)),
			middleware.WithLogger(w.log),
			middleware.WithObserver(w.metrics.observeTask),
		}, w.mwOpts...)
		mw, err := middleware.New(w.locks, key, append(all, opts...)...)
		if err != nil {
			return fmt.Errorf("worker: %s: %w", taskType, err)
		}
		h = mw(h)
	}
	w.mux.Handle(taskType, w.track(nameHolder(h)))
	return nil
}

// HandleFunc is Handle for a function.
func (w *Worker) HandleFunc(taskType string, f func(context.Context, *asynq.Task) error, key middleware.KeyFunc, opts ...middleware.Option) error {
	return w.Handle(taskType, asynq.HandlerFunc(f), key, opts...)
}

// track counts handlers that have not returned, so that shutdown can wait
// for their locks to be released even after asynq stopped waiting.
func (w *Worker) track(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		w.inflight.Add(1)
		defer w.inflight.Done()
		return h.ProcessTask(ctx, t)
	})
}

// Locks returns the worker's lock client, e.g. for jobs outside asynq.
func (w *Worker) Locks() *redlock.Client { return w.locks }

// Client returns an asynq client to the worker's broker, for enqueuing.
func (w *Worker) Client() *asynq.Client { return w.client }

// Registry returns the Prometheus registry served on /metrics.
func (w *Worker) Registry() *prometheus.Registry { return w.reg }

// Ready reports whether the broker and a quorum of lock nodes answered the
// last probe.
func (w *Worker) Ready() bool { return w.ready.Load() }

// Addr returns the HTTP endpoint's address once Run listens ("" before, or
// when METRICS_ADDR is empty).
func (w *Worker) Addr() string {
	a, _ := w.addr.Load().(string)
	return a
}

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

	var httpSrv *http.Server
	if w.cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", w.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("worker: METRICS_ADDR %s: %w", w.cfg.MetricsAddr, err)
		}
		w.addr.Store(ln.Addr().String())
		httpSrv = &http.Server{Handler: w.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				w.log.Error("metrics endpoint stopped", "err", err)
			}
		}()
	}

	lvl, _ := parseLevel(w.cfg.LogLevel)
	srv := asynq.NewServer(w.broker, asynq.Config{
		Concurrency:              w.cfg.Concurrency,
		Queues:                   w.cfg.Queues,
		StrictPriority:           w.cfg.StrictPriority,
		ShutdownTimeout:          w.cfg.ShutdownTimeout,
		TaskCheckInterval:        w.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: w.cfg.DelayedTaskCheckInterval,
		IsFailure:                middleware.IsFailure,
		RetryDelayFunc:           middleware.RetryDelay,
		Logger:                   asynqLogger{w.log},
		LogLevel:                 asynqLevel(lvl),
	})
	nodeCheckDone, err := w.startNodeCheck(ctx)
	if err != nil {
		if httpSrv != nil {
			_ = httpSrv.Close()
		}
		return err
	}
	w.checkReady(ctx)
	if err := srv.Start(w.mux); err != nil {
		if httpSrv != nil {
			_ = httpSrv.Close()
		}
		return fmt.Errorf("worker: start asynq server: %w", err)
	}
	w.startCrons()
	w.log.Info("worker started", "concurrency", w.cfg.Concurrency, "queues", w.cfg.Queues, "lock_nodes", lockadmin.Nodes(w.locks), "metrics", w.Addr())

	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		t := time.NewTicker(w.probe)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.checkReady(ctx)
			}
		}
	}()

	<-ctx.Done()
	<-nodeCheckDone // it ends with ctx
	stop()          // a second SIGINT/SIGTERM now ends the process at once
	w.log.Info("worker shutting down", "timeout", w.cfg.ShutdownTimeout)
	<-probeDone // no probe may flip readiness back on
	w.stopping.Store(true)
	w.ready.Store(false)
	boolGauge(w.metrics.ready, false)
	shutdownStart := time.Now()
	w.stopCrons(w.cfg.ShutdownTimeout)
	srv.Shutdown() // stops taking tasks; unfinished ones go back to the queue
	// Handlers asynq stopped waiting for get what is left of the timeout
	// (at least a second), so the whole shutdown stays near it.
	w.waitHandlers(max(w.cfg.ShutdownTimeout-time.Since(shutdownStart), time.Second))
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
	}
	w.log.Info("worker stopped")
	return nil
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

func (w *Worker) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusOK)
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ready, body := w.health.readyz(w.stopping.Load())
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = rw.Write([]byte(body + "\n"))
	})
	return w.lockRoutes(mux)
}

// Close releases the worker's connections; Run does it on return. Call it
// for a worker that is never run.
func (w *Worker) Close() error {
	var err error
	w.closeOnce.Do(func() {
		err = errors.Join(w.client.Close(), w.inspector.Close(), w.ping.Close(), w.locks.Close())
	})
	return err
}
