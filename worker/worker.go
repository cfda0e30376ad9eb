package worker

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/hibiken/asynq"
	queuemetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Worker is an asynq server whose handlers hold per-resource locks.
type Worker struct {
	cfg       Config
	log       *slog.Logger
	once      *workerconfig.Once // the dependencies' lines, once per change (logging.go)
	locks     *redlock.Client
	broker    asynq.RedisConnOpt
	client    *asynq.Client
	inspector *asynq.Inspector
	ping      redis.UniversalClient // broker readiness probe
	mux       *asynq.ServeMux
	app       *asynq.Config     // the application's asynq settings (WithAsynqConfig), or nil
	room      middleware.Option // the running and waiting tasks' places, shared by every Handle
	reg       *prometheus.Registry
	metrics   *metrics
	health    *health
	nodes     nodeCheck    // lock nodes' identity and settings (nodecheck.go)
	seen      lockAges     // when the /locks page first saw each claim (lockages.go)
	parked    parkedReader // for the /locks page

	ready     atomic.Bool
	stopping  atomic.Bool
	inflight  sync.WaitGroup
	closeOnce sync.Once
	addr      atomic.Value // string: the HTTP endpoint's address once listening
	running   atomic.Bool
	crons     *crons // hosted cron schedulers, made on first use
	cronOnce  sync.Once
	traces    *sdktrace.TracerProvider // the OTLP pipeline New made (tracing.go), or nil
	taskSpans asynq.MiddlewareFunc     // the asynq.task span around each task, in traces or the global provider
	tracesTo  string                   // traces' endpoint, for the start line
}

// New builds a worker from cfg: it connects nothing yet beyond creating
// clients; Run starts serving. Register handlers with Handle before Run.
// A configuration that cannot work is refused with an error matching
// ErrConfig, a bad OTEL_* tracing variable among them.
//
// When OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set (and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none),
// New exports traces over OTLP/HTTP, configured by the standard OTEL_*
// variables (service name, resource, headers, sampler, batching), through a
// batch span processor that Close flushes; the provider becomes the global
// one, unless the application set its own first (then the worker's spans go
// there). Either way the worker records a span asynq.task per task it runs,
// the parent of the lock's spans. With no endpoint set nothing is installed
// and tracing costs nothing until the application sets a global provider.
func New(cfg Config, opts ...Option) (*Worker, error) {
	otelCfg, otelProblems := readOTelEnv(os.Getenv)
	if ps := append(cfg.check(), otelProblems...); len(ps) > 0 {
		return nil, &workerconfig.Error{Problems: ps}
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.asynq != nil {
		if ps := checkApp(o.asynq); len(ps) > 0 {
			return nil, &workerconfig.Error{Problems: ps}
		}
	}
	ownsDefault := o.log == nil
	if ownsDefault {
		slog.SetDefault(newLogger(cfg, os.Stderr))
		o.log = slog.Default()
	}
	b, _ := parseBroker(cfg.AsynqRedisURL, cfg.asynqTLS())
	w := &Worker{cfg: cfg, log: o.log, broker: b.opt, mux: o.mux, app: o.asynq, reg: prometheus.NewRegistry(),
		room: middleware.WithRoom(cfg.Concurrency, cfg.waitRoom())}
	if w.mux == nil {
		w.mux = asynq.NewServeMux()
	}
	w.once = dependencyLogs(o.log, ownsDefault)
	w.metrics = newMetrics(w.reg)
	w.metrics.zero(cfg.ConflictPolicy)
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := w.newLocks(otelCfg); err != nil {
		return nil, err
	}
	w.health = &health{log: w.log, m: w.metrics, brokerAddr: b.addr, quorum: lockadmin.Quorum(len(cfg.RedlockNodes)), recovered: w.recovered}
	w.client = asynq.NewClient(b.opt)
	w.inspector = asynq.NewInspector(b.opt)
	w.ping = probeClient(b.opt)
	w.parked = newBrokerParked(w.ping, cfg.Queues)
	if cfg.MetricsAddr != "" {
		// It queries the broker at every scrape (and once here), logging
		// "Failed to collect metrics data" when that fails: with the
		// endpoint off nobody would read what it collects.
		w.reg.MustRegister(queuemetrics.NewQueueMetricsCollector(w.inspector), newQueueParked(w.ping, cfg.Queues))
	}
	return w, nil
}

// newLocks makes the trace pipeline otelCfg asks for, then the lock client,
// its spans in that pipeline.
func (w *Worker) newLocks(otelCfg otelEnv) error {
	traces, err := startTracing(otelCfg, w.log, w.once)
	if err != nil {
		return err
	}
	lockOpts := []redlock.Option{redlock.WithLogger(w.log), redlock.WithObserver(w.metrics.observeLock)}
	w.taskSpans = TraceTasks(nil)
	if traces != nil {
		w.traces, w.tracesTo, w.taskSpans = traces, otelCfg.endpoint, TraceTasks(traces)
		lockOpts = append(lockOpts, redlock.WithTracerProvider(traces))
	}
	locks, err := w.cfg.locks().NewClient(lockOpts...)
	if err != nil {
		return errors.Join(err, w.stopTracing())
	}
	w.locks = locks
	return nil
}

// Locks returns the worker's lock client, for locks outside its handlers'
// (its Scheduler's jobs take theirs from it too).
func (w *Worker) Locks() *redlock.Client { return w.locks }

// Client returns an asynq client to the worker's broker, for enqueuing.
func (w *Worker) Client() *asynq.Client { return w.client }

// Registry returns the Prometheus registry served on /metrics: register the
// application's own collectors there. With METRICS_ADDR off it holds no
// asynq queue series (their collector is not started).
func (w *Worker) Registry() *prometheus.Registry { return w.reg }

// Addr returns the HTTP endpoint's address once Run listens ("" before, or
// when METRICS_ADDR is off): with METRICS_ADDR=127.0.0.1:0, the port chosen.
func (w *Worker) Addr() string {
	a, _ := w.addr.Load().(string)
	return a
}

// Close releases the worker's connections and flushes its buffered spans
// (for up to 5s); Run does it on return. Call it for a worker that is never
// run. The lock client goes first: its Close waits for the releases of the
// last tasks (the middleware does not wait for them), and what follows
// them (a promotion) still finds the broker.
func (w *Worker) Close() error {
	var err error
	w.closeOnce.Do(func() {
		err = errors.Join(w.locks.Close(), w.client.Close(), w.inspector.Close(), w.ping.Close(), w.stopTracing())
	})
	return err
}

// recovered lets the dependencies' lines about a component that answers
// again be logged again when it next fails: asynq's all when it is the
// broker, those naming its address otherwise.
func (w *Worker) recovered(addr string, broker bool) {
	w.once.Forget(addr)
	if broker {
		w.once.ForgetSource("asynq")
		w.once.ForgetSource("log")
	}
}
