package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/redisurl"
	"github.com/caarlos0/env/v11"
)

// Config is the worker's configuration, read from the environment by
// LoadConfig. The env tags name the variables.
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
	// redis:// or rediss:// URLs, comma-separated.
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
	// Concurrency is the number of tasks processed at once.
	Concurrency int `env:"WORKER_CONCURRENCY" envDefault:"10"`
	// Queues maps queue names to priorities: "critical:6,default:3,low:1".
	Queues map[string]int `env:"WORKER_QUEUES" envDefault:"default:1" envSeparator:"," envKeyValSeparator:":"`
	// StrictPriority processes higher-priority queues strictly first.
	StrictPriority bool `env:"WORKER_STRICT_PRIORITY" envDefault:"false"`
	// ShutdownTimeout bounds how long in-flight tasks may finish on shutdown.
	ShutdownTimeout time.Duration `env:"WORKER_SHUTDOWN_TIMEOUT" envDefault:"30s"`
	// TaskCheckInterval is how often an idle worker looks for new tasks.
	TaskCheckInterval time.Duration `env:"WORKER_TASK_CHECK_INTERVAL" envDefault:"250ms"`
	// DelayedTaskCheckInterval is how often scheduled and retried tasks
	// (requeued conflicts among them) are moved back to their queue; asynq's
	// own default of 5s would make a busy resource's tasks wait that long.
	DelayedTaskCheckInterval time.Duration `env:"WORKER_DELAYED_TASK_CHECK_INTERVAL" envDefault:"250ms"`
	// ConflictPolicy is what happens to a task whose resource is busy:
	// wait, requeue, skip or fail.
	ConflictPolicy string `env:"WORKER_CONFLICT_POLICY" envDefault:"wait"`
	// ConflictWait bounds the wait of the "wait" policy.
	ConflictWait time.Duration `env:"WORKER_CONFLICT_WAIT" envDefault:"2s"`
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// set but empty, or "off", disables the endpoint.
	MetricsAddr string `env:"METRICS_ADDR" envDefault:":9090"`
	// LocksPage serves the read-only /locks page (held locks, holders,
	// node health) on the METRICS_ADDR endpoint; false turns it off.
	LocksPage bool `env:"WORKER_LOCKS_PAGE" envDefault:"true"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `env:"LOG_LEVEL" envDefault:"info"`
	// LogFormat is text or json.
	LogFormat string `env:"LOG_FORMAT" envDefault:"text"`
}

// ErrConfig marks a configuration error; the message lists every problem.
var ErrConfig = errors.New("worker: invalid configuration")

// ConfigError lists every problem found in the environment, one per
// variable, each with what is expected. Values of secret-bearing variables
// (URLs) are never shown.
type ConfigError struct {
	Problems []Problem
}

// Problem is one bad or missing variable.
type Problem struct {
	Var     string // the environment variable
	Message string // what is wrong and what is expected
}

// Error lists the problems, one per line.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(ErrConfig.Error())
	b.WriteString(":")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %s: %s", p.Var, p.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

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
// every bad or missing one at once.
func LoadConfigFrom(vars map[string]string) (Config, error) {
	var cfg Config
	ce := &ConfigError{}
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
	ce.Problems = append(ce.Problems, cfg.check()...)
	ce.Problems = append(ce.Problems, repeatedQueues(vars["WORKER_QUEUES"])...)
	if len(ce.Problems) > 0 {
		return cfg, ce
	}
	return cfg, nil
}

// repeatedQueues reports a queue named twice in WORKER_QUEUES: the map it
// is parsed into would keep only the last priority, silently.
func repeatedQueues(raw string) []Problem {
	seen := map[string]bool{}
	var ps []Problem
	for pair := range strings.SplitSeq(raw, ",") {
		name, _, _ := strings.Cut(pair, ":")
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if seen[name] {
			ps = append(ps, Problem{"WORKER_QUEUES", fmt.Sprintf("queue %q is named more than once; give each queue one priority", name)})
		}
		seen[name] = true
	}
	return ps
}

// secretVars are never quoted in messages: their values carry passwords.
var secretVars = map[string]bool{"ASYNQ_REDIS_URL": true, "REDLOCK_NODES": true}

// expectations say what each variable must hold.
var expectations = map[string]string{
	"REDLOCK_TTL":                        "a duration such as 30s",
	"REDLOCK_NODE_TIMEOUT":               "a duration such as 50ms",
	"REDLOCK_DRIFT_FACTOR":               "a number in [0, 0.5), e.g. 0.01",
	"WORKER_CONCURRENCY":                 "a positive integer",
	"WORKER_QUEUES":                      `queue:priority pairs such as "critical:6,default:3"`,
	"WORKER_STRICT_PRIORITY":             "true or false",
	"WORKER_LOCKS_PAGE":                  "true or false",
	"WORKER_SHUTDOWN_TIMEOUT":            "a duration such as 30s",
	"WORKER_CONFLICT_WAIT":               "a duration such as 2s",
	"WORKER_TASK_CHECK_INTERVAL":         "a duration such as 250ms",
	"WORKER_DELAYED_TASK_CHECK_INTERVAL": "a duration such as 250ms",
	"ASYNQ_REDIS_URL":                    "a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL",
	"REDLOCK_NODES":                      "a comma-separated list of redis:// or rediss:// URLs",
}

// problemOf turns an env error into a Problem naming the variable.
func problemOf(err error) Problem {
	var notSet env.VarIsNotSetError
	var empty env.EmptyVarError
	var parse env.ParseError
	switch {
	case errors.As(err, &notSet):
		return Problem{notSet.Key, "is required and not set; expected " + expectations[notSet.Key]}
	case errors.As(err, &empty):
		return Problem{empty.Key, "is empty; expected " + expectations[empty.Key]}
	case errors.As(err, &parse):
		key := envKey(parse.Name)
		msg := "cannot be parsed; expected " + expectations[key]
		if !secretVars[key] {
			msg += fmt.Sprintf(" (%v)", parse.Err)
		}
		return Problem{key, msg}
	}
	return Problem{"environment", err.Error()}
}

// envKey returns the variable of a Config field.
func envKey(field string) string {
	f, ok := reflect.TypeFor[Config]().FieldByName(field)
	if !ok {
		return field
	}
	key, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return key
}

// asynqTLS and redlockTLS are the TLS files from the environment.
func (c *Config) asynqTLS() tlsFiles {
	return tlsFiles{c.AsynqTLSCAFile, c.AsynqTLSCertFile, c.AsynqTLSKeyFile}
}

func (c *Config) redlockTLS() tlsFiles {
	return tlsFiles{c.RedlockTLSCAFile, c.RedlockTLSCertFile, c.RedlockTLSKeyFile}
}

// nodeURLs are the lock node URLs with the environment's TLS files added.
func (c *Config) nodeURLs() []string {
	urls := make([]string, len(c.RedlockNodes))
	for i, u := range c.RedlockNodes {
		urls[i] = withTLSDefaults(u, c.redlockTLS())
	}
	return urls
}

// checkURLs checks the TLS files, the broker URL and the node URLs; a
// problem names the variable and the URL with its password masked.
func (c *Config) checkURLs() []Problem {
	var ps []Problem
	for _, v := range []struct {
		prefix string
		f      tlsFiles
	}{{"ASYNQ_TLS_", c.asynqTLS()}, {"REDLOCK_TLS_", c.redlockTLS()}} {
		prefix, f := v.prefix, v.f
		if err := redisurl.AddTLSFiles(&tls.Config{}, f.ca, "", ""); err != nil {
			ps = append(ps, Problem{prefix + "CA_FILE", err.Error()})
		}
		if err := redisurl.AddTLSFiles(&tls.Config{}, "", f.cert, f.key); err != nil {
			ps = append(ps, Problem{prefix + "CERT_FILE and " + prefix + "KEY_FILE", err.Error()})
		}
	}
	if c.AsynqRedisURL != "" {
		if _, err := parseBroker(c.AsynqRedisURL, c.asynqTLS()); err != nil {
			ps = append(ps, Problem{"ASYNQ_REDIS_URL", err.Error()})
		}
	}
	for i, u := range c.nodeURLs() {
		if _, err := redisurl.ParseNode(u); err != nil {
			ps = append(ps, Problem{"REDLOCK_NODES", fmt.Sprintf("node %d: %v", i, err)})
		}
	}
	return ps
}

// check validates values that parsed.
func (c *Config) check() []Problem {
	var ps []Problem
	add := func(v, format string, args ...any) { ps = append(ps, Problem{v, fmt.Sprintf(format, args...)}) }
	ps = append(ps, c.checkURLs()...)
	if c.LockTTL <= 0 {
		add("REDLOCK_TTL", "must be positive, got %v", c.LockTTL)
	}
	if c.NodeTimeout <= 0 {
		add("REDLOCK_NODE_TIMEOUT", "must be positive, got %v", c.NodeTimeout)
	} else if c.LockTTL > 0 && c.NodeTimeout*3 > c.LockTTL {
		add("REDLOCK_NODE_TIMEOUT", "%v is not small against REDLOCK_TTL %v; expected at most a third of it", c.NodeTimeout, c.LockTTL)
	}
	if math.IsNaN(c.DriftFactor) || c.DriftFactor < 0 || c.DriftFactor >= 0.5 {
		add("REDLOCK_DRIFT_FACTOR", "must be in [0, 0.5), got %v", c.DriftFactor)
	}
	if c.Concurrency <= 0 {
		add("WORKER_CONCURRENCY", "must be a positive integer, got %d", c.Concurrency)
	}
	if len(c.Queues) == 0 {
		add("WORKER_QUEUES", "names no queue; expected %s", expectations["WORKER_QUEUES"])
	}
	for q, p := range c.Queues {
		if q == "" || p <= 0 {
			add("WORKER_QUEUES", "queue %q has priority %d; expected a name and a positive priority", q, p)
		}
	}
	if c.ShutdownTimeout <= 0 {
		add("WORKER_SHUTDOWN_TIMEOUT", "must be positive, got %v", c.ShutdownTimeout)
	}
	if c.TaskCheckInterval <= 0 {
		add("WORKER_TASK_CHECK_INTERVAL", "must be positive, got %v", c.TaskCheckInterval)
	}
	if c.DelayedTaskCheckInterval <= 0 {
		add("WORKER_DELAYED_TASK_CHECK_INTERVAL", "must be positive, got %v", c.DelayedTaskCheckInterval)
	}
	if _, err := c.policy(); err != nil {
		add("WORKER_CONFLICT_POLICY", "%v", err)
	}
	if c.ConflictWait < 0 || c.ConflictPolicy == "wait" && c.ConflictWait == 0 {
		add("WORKER_CONFLICT_WAIT", "must be positive with the wait policy (use requeue for no wait), got %v", c.ConflictWait)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		add("LOG_LEVEL", "%v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		add("LOG_FORMAT", "must be text or json, got %q", c.LogFormat)
	}
	return ps
}
