package worker

import (
	"crypto/tls"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
)

// maxCompletionWindow is middleware.WithCompletionWindow's bound (a record
// is kept on every lock node for its window), checked here with the other
// variables; TestCompletionWindowBoundIsTheMiddlewares keeps the two equal.
const maxCompletionWindow = 30 * 24 * time.Hour

// maxLimit is middleware.WithLimit's bound, checked here with the other
// variables; TestLimitBoundIsTheMiddlewares keeps the two equal.
const maxLimit = 1024

// asynqTLS is the broker's TLS files from the environment.
func (c *Config) asynqTLS() workerconfig.TLSFiles {
	return workerconfig.TLSFiles{CA: c.AsynqTLSCAFile, Cert: c.AsynqTLSCertFile, Key: c.AsynqTLSKeyFile}
}

// locks is the lock client's part of the configuration.
func (c *Config) locks() workerconfig.Locks {
	return workerconfig.Locks{Nodes: c.RedlockNodes, NodeTimeout: c.NodeTimeout, DriftFactor: c.DriftFactor, Prefix: c.LockPrefix,
		TLS: workerconfig.TLSFiles{CA: c.RedlockTLSCAFile, Cert: c.RedlockTLSCertFile, Key: c.RedlockTLSKeyFile}}
}

// checkURLs checks the TLS files, the broker URL and the node URLs; a
// problem names the variable and the URL with its password masked.
func (c *Config) checkURLs() []problem {
	var ps []problem
	for _, v := range []struct {
		prefix string
		f      workerconfig.TLSFiles
	}{{"ASYNQ_TLS_", c.asynqTLS()}, {"REDLOCK_TLS_", c.locks().TLS}} {
		prefix, f := v.prefix, v.f
		if err := redisurl.AddTLSFiles(&tls.Config{}, f.CA, "", ""); err != nil {
			ps = append(ps, problem{Var: prefix + "CA_FILE", Message: err.Error()})
		}
		if err := redisurl.AddTLSFiles(&tls.Config{}, "", f.Cert, f.Key); err != nil {
			ps = append(ps, problem{Var: prefix + "CERT_FILE and " + prefix + "KEY_FILE", Message: err.Error()})
		}
	}
	if c.AsynqRedisURL != "" {
		if _, err := parseBroker(c.AsynqRedisURL, c.asynqTLS()); err != nil {
			ps = append(ps, problem{Var: "ASYNQ_REDIS_URL", Message: err.Error()})
		}
	}
	for i, u := range c.locks().NodeURLs() {
		if strings.TrimSpace(u) == "" {
			ps = append(ps, problem{Var: "REDLOCK_NODES", Message: fmt.Sprintf("node %d: empty entry (a stray comma?); expected a redis://, rediss:// or redis-cluster:// URL between commas", i)})
			continue
		}
		if _, _, err := redisurl.ParseLockNode(u); err != nil {
			ps = append(ps, problem{Var: "REDLOCK_NODES", Message: fmt.Sprintf("node %d: %v", i, err)})
		}
	}
	return ps
}

// check validates values that parsed.
func (c *Config) check() []problem {
	var ps []problem
	add := func(v, format string, args ...any) {
		ps = append(ps, problem{Var: v, Message: fmt.Sprintf(format, args...)})
	}
	ps = append(ps, c.checkURLs()...)
	for _, d := range []struct {
		v string
		d time.Duration
	}{
		{"REDLOCK_TTL", c.LockTTL}, {"REDLOCK_NODE_TIMEOUT", c.NodeTimeout},
		{"WORKER_SHUTDOWN_TIMEOUT", c.ShutdownTimeout}, {"WORKER_TASK_CHECK_INTERVAL", c.TaskCheckInterval},
		{"WORKER_DELAYED_TASK_CHECK_INTERVAL", c.DelayedTaskCheckInterval},
		{"WORKER_READINESS_INTERVAL", c.ReadinessInterval}, {"WORKER_NODE_CHECK_INTERVAL", c.NodeCheckInterval},
	} {
		if d.d <= 0 {
			add(d.v, "must be positive, got %v", d.d)
		}
	}
	if c.NodeTimeout > 0 && c.LockTTL > 0 && c.NodeTimeout*3 > c.LockTTL {
		add("REDLOCK_NODE_TIMEOUT", "%v is not small against REDLOCK_TTL %v; expected at most a third of it", c.NodeTimeout, c.LockTTL)
	}
	if math.IsNaN(c.DriftFactor) || c.DriftFactor < 0 || c.DriftFactor >= 0.5 {
		add("REDLOCK_DRIFT_FACTOR", "must be in [0, 0.5), got %v", c.DriftFactor)
	}
	if c.Concurrency <= 0 {
		add("WORKER_CONCURRENCY", "must be a positive integer, got %d", c.Concurrency)
	}
	if c.WaitRoom < -1 {
		add("WORKER_WAIT_ROOM", "must be -1 (twice WORKER_CONCURRENCY), 0 or a positive integer, got %d", c.WaitRoom)
	}
	ps = append(ps, c.checkQueues()...)
	if _, err := c.policy(); err != nil {
		add("WORKER_CONFLICT_POLICY", "%v", err)
	}
	for _, typ := range slices.Sorted(maps.Keys(c.Limits)) {
		if n := c.Limits[typ]; n < 1 || n > maxLimit {
			add("WORKER_LIMITS", "%s: the limit must be in [1, %d], got %d", typ, maxLimit, n)
		}
	}
	if c.CompletionWindow < 0 || c.CompletionWindow > maxCompletionWindow {
		add("WORKER_COMPLETION_WINDOW", "must be in [0, %v] (0: no completion records), got %v", maxCompletionWindow, c.CompletionWindow)
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

// checkQueues checks that WORKER_QUEUES names queues with positive
// priorities.
func (c *Config) checkQueues() []problem {
	if len(c.Queues) == 0 {
		return []problem{{Var: "WORKER_QUEUES", Message: "names no queue; expected " + expectations["WORKER_QUEUES"]}}
	}
	var ps []problem
	for q, p := range c.Queues {
		if q == "" || p <= 0 {
			ps = append(ps, problem{Var: "WORKER_QUEUES", Message: fmt.Sprintf("queue %q has priority %d; expected a name and a positive priority", q, p)})
		}
	}
	return ps
}
