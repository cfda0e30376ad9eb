package worker

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/caarlos0/env/v11"
)

// Config is the worker's configuration, read from the environment by
// LoadConfig: the env tags name the variables, envDefault their defaults.
// New refuses a Config that cannot work, naming each bad field's variable.
type Config struct {
	// AsynqRedisURL is asynq's broker: redis://[user:password@]host:port[/db],
	// rediss:// (TLS), redis-sentinel://[user:password@]host:port[,host:port...][/db]?master=name
	// [&username=u&password=p] (user info for the sentinels, parameters for
	// the master), or redis-cluster:// / rediss-cluster://[user:password@]host:port[,host:port...].
	AsynqRedisURL string `env:"ASYNQ_REDIS_URL,required,notEmpty"`
	// AsynqTLSCAFile is a PEM file of the private CA that signs the
	// broker's certificate, for a rediss broker URL that names none.
	AsynqTLSCAFile string `env:"ASYNQ_TLS_CA_FILE"`
	// AsynqTLSCertFile and AsynqTLSKeyFile are an optional PEM client
	// certificate and its key for the broker (both or neither).
	AsynqTLSCertFile string `env:"ASYNQ_TLS_CERT_FILE"`
	AsynqTLSKeyFile  string `env:"ASYNQ_TLS_KEY_FILE"`
	// RedlockNodes are the lock nodes: independent masters, as
	// redis:// or rediss:// URLs, comma-separated; a node that is a whole
	// Redis Cluster is redis-cluster:// or rediss-cluster://[user:password@]
	// host:port[?addr=host:port&addr=...] (seeds as parameters: the comma
	// separates nodes).
	RedlockNodes []string `env:"REDLOCK_NODES,required,notEmpty" envSeparator:","`
	// RedlockTLSCAFile is a PEM file of the private CA that signs the lock
	// nodes' certificates, for rediss node URLs that name none.
	RedlockTLSCAFile string `env:"REDLOCK_TLS_CA_FILE"`
	// RedlockTLSCertFile and RedlockTLSKeyFile are an optional PEM client
	// certificate and its key for the lock nodes (both or neither).
	RedlockTLSCertFile string `env:"REDLOCK_TLS_CERT_FILE"`
	RedlockTLSKeyFile  string `env:"REDLOCK_TLS_KEY_FILE"`
	// LockTTL is the TTL of task locks; they are extended while tasks run.
	LockTTL time.Duration `env:"REDLOCK_TTL" envDefault:"30s"`
	// NodeTimeout bounds each call to one lock node.
	NodeTimeout time.Duration `env:"REDLOCK_NODE_TIMEOUT" envDefault:"50ms"`
	// DriftFactor is the clock-drift allowance as a fraction of the TTL.
	DriftFactor float64 `env:"REDLOCK_DRIFT_FACTOR" envDefault:"0.01"`
	// LockPrefix prefixes every lock key.
	LockPrefix string `env:"REDLOCK_PREFIX" envDefault:"asynqlock:"`
	// Concurrency is the number of tasks that try for their locks or run
	// their handlers at once.
	Concurrency int `env:"WORKER_CONCURRENCY" envDefault:"10"`
	// WaitRoom is how many more tasks the worker takes from its queues to
	// wait for their locks, beside the Concurrency that run: waiting tasks
	// then never take a running task's place (middleware.WithRoom). -1 (the
	// default) is twice Concurrency; 0 lets waiting tasks take the places
	// of running ones.
	WaitRoom int `env:"WORKER_WAIT_ROOM" envDefault:"-1"`
	// Queues maps queue names to priorities: "critical:6,default:3,low:1".
	Queues map[string]int `env:"WORKER_QUEUES" envDefault:"default:1" envSeparator:"," envKeyValSeparator:":"`
	// StrictPriority processes higher-priority queues strictly first.
	StrictPriority bool `env:"WORKER_STRICT_PRIORITY" envDefault:"false"`
	// ShutdownTimeout bounds how long in-flight tasks may finish on shutdown.
	ShutdownTimeout time.Duration `env:"WORKER_SHUTDOWN_TIMEOUT" envDefault:"30s"`
	// TaskCheckInterval is how often an idle worker looks for new tasks
	// (asynq sleeps about this long after finding its queues empty). A
	// promoted parked task waits for that look: at 250ms a hot resource's
	// tasks arrived too late to keep its lock busy (docs/guide/HOTKEYS.md); 20ms
	// costs an idle worker about 50 cheap dequeue calls a second.
	TaskCheckInterval time.Duration `env:"WORKER_TASK_CHECK_INTERVAL" envDefault:"20ms"`
	// DelayedTaskCheckInterval is how often scheduled and retried tasks
	// (requeued conflicts among them) are moved back to their queue; asynq's
	// own default of 5s would make a busy resource's tasks wait that long.
	DelayedTaskCheckInterval time.Duration `env:"WORKER_DELAYED_TASK_CHECK_INTERVAL" envDefault:"250ms"`
	// Limits maps task types to their limit (middleware.WithLimit): up to
	// n tasks of one key of that type run at once, across every worker;
	// "tenant:import=3,payment:charge=10". Handle's own WithLimit wins.
	Limits map[string]int `env:"WORKER_LIMITS" envSeparator:"," envKeyValSeparator:"="`
	// ConflictPolicy is what happens to a task whose resource is busy:
	// wait, requeue, skip or fail.
	ConflictPolicy string `env:"WORKER_CONFLICT_POLICY" envDefault:"wait"`
	// ConflictWait is the wait of the "wait" policy (middleware.Wait): a
	// task whose holder stays put is requeued after at most 2×ConflictWait
	// (one wait, then one renewal while it is parked in line); one whose
	// resource keeps changing hands stays in line and may wait up to
	// 15×ConflictWait, as long as the line moves.
	ConflictWait time.Duration `env:"WORKER_CONFLICT_WAIT" envDefault:"2s"`
	// CompletionWindow is how long the lock nodes keep the record of a task
	// whose handler returned nil (middleware.WithCompletionWindow): a
	// delivery of it within the window completes without running again.
	// It must cover the longest broker outage to ride out; 0 turns records
	// off.
	CompletionWindow time.Duration `env:"WORKER_COMPLETION_WINDOW" envDefault:"1h"`
	// ReadinessInterval is how often the broker and the lock nodes are
	// probed for /readyz.
	ReadinessInterval time.Duration `env:"WORKER_READINESS_INTERVAL" envDefault:"1s"`
	// NodeCheckInterval is how often the lock nodes' identity (run_id),
	// settings and clocks are checked while the worker runs; while a node
	// is down it is checked at every readiness probe instead, so that a
	// node that comes back is compared at once.
	NodeCheckInterval time.Duration `env:"WORKER_NODE_CHECK_INTERVAL" envDefault:"10s"`
	// MetricsAddr is the listen address of /metrics, /healthz, /readyz and
	// /locks; set but empty, or "off", disables the endpoint. The default
	// listens on loopback only, on a port of its own (not the Prometheus
	// server's 9090): set ":10090" (every interface) for a scraper or a
	// kubelet on another address; whoever reaches the port can read /locks.
	MetricsAddr string `env:"METRICS_ADDR" envDefault:"127.0.0.1:10090"`
	// LocksPage serves the read-only /locks page (held locks, holders,
	// node health) on the METRICS_ADDR endpoint; false turns it off.
	LocksPage bool `env:"WORKER_LOCKS_PAGE" envDefault:"true"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `env:"LOG_LEVEL" envDefault:"info"`
	// LogFormat is text or json.
	LogFormat string `env:"LOG_FORMAT" envDefault:"text"`
}

// ErrConfig marks a configuration error (from LoadConfig, LoadConfigFrom or
// New); the message lists every problem, one per variable, with what is
// expected and never a password.
var ErrConfig = workerconfig.ErrInvalid

// problem is one bad or missing variable.
type problem = workerconfig.Problem

// LoadConfig reads the configuration from the process environment.
func LoadConfig() (Config, error) {
	return LoadConfigFrom(environ())
}

func environ() map[string]string {
	m := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// LoadConfigFrom reads the configuration from the given variables, reporting
// every bad or missing one at once, the OTEL_* tracing variables that New
// reads from the process environment among them.
func LoadConfigFrom(vars map[string]string) (Config, error) {
	var cfg Config
	ce := &workerconfig.Error{}
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: vars}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		for _, e := range agg.Errors {
			ce.Problems = append(ce.Problems, problemOf(e))
		}
	}
	// env applies a default to an empty value too; an empty (or "off")
	// METRICS_ADDR is documented to turn the endpoint off.
	if v, ok := vars["METRICS_ADDR"]; ok && (strings.TrimSpace(v) == "" || strings.EqualFold(strings.TrimSpace(v), "off")) {
		cfg.MetricsAddr = ""
	}
	ce.Problems = append(ce.Problems, unparsed(cfg.check(), ce.Problems)...)
	ce.Problems = append(ce.Problems, repeatedQueues(vars["WORKER_QUEUES"])...)
	_, otelProblems := readOTelEnv(func(k string) string { return vars[k] })
	ce.Problems = append(ce.Problems, otelProblems...)
	if len(ce.Problems) > 0 {
		return cfg, ce
	}
	return cfg, nil
}

// unparsed drops from checks the problems of variables that already have
// one (a value that did not parse is zero: "must be positive, got 0s" would
// only repeat it).
func unparsed(checks, known []problem) []problem {
	seen := map[string]bool{}
	for _, p := range known {
		seen[p.Var] = true
	}
	var out []problem
	for _, p := range checks {
		if !seen[p.Var] {
			out = append(out, p)
		}
	}
	return out
}

// waitRoom is WaitRoom with its default (-1) resolved: twice Concurrency.
func (c *Config) waitRoom() int {
	if c.WaitRoom < 0 {
		return 2 * c.Concurrency
	}
	return c.WaitRoom
}

// workers is asynq's Concurrency: the running tasks and the waiting room.
func (c *Config) workers() int { return c.Concurrency + c.waitRoom() }
