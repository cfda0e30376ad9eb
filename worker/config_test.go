package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func goodEnv() map[string]string {
	return map[string]string{
		"ASYNQ_REDIS_URL": "redis://:brokerpw@broker:6379/2",
		"REDLOCK_NODES":   "redis://a:6379,rediss://user:lockpw@b:6380/1,redis://c:6379",
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	cfg, err := LoadConfigFrom(goodEnv())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RedlockNodes) != 3 || cfg.LockTTL != 30*time.Second || cfg.NodeTimeout != 50*time.Millisecond ||
		cfg.Concurrency != 10 || cfg.Queues["default"] != 1 || cfg.ShutdownTimeout != 30*time.Second ||
		cfg.ConflictPolicy != "wait" || cfg.MetricsAddr != "127.0.0.1:10090" || cfg.LogLevel != "info" || cfg.LogFormat != "text" ||
		cfg.ReadinessInterval != time.Second || cfg.NodeCheckInterval != 10*time.Second {
		t.Fatalf("defaults: %+v", cfg)
	}
	vars := goodEnv()
	vars["WORKER_QUEUES"] = "critical:6,default:3,low:1"
	vars["REDLOCK_TTL"] = "10s"
	vars["WORKER_CONCURRENCY"] = "32"
	vars["LOG_FORMAT"] = "json"
	cfg, err = LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queues["critical"] != 6 || cfg.Queues["low"] != 1 || cfg.LockTTL != 10*time.Second || cfg.Concurrency != 32 {
		t.Fatalf("parsed %+v", cfg)
	}
}

// TestWaitRoomSizesAsynq: the waiting room defaults to twice
// WORKER_CONCURRENCY; asynq takes both at once (each resource's share of it
// is the middleware's room's business).
func TestWaitRoomSizesAsynq(t *testing.T) {
	for _, c := range []struct {
		room              string
		wantRoom, workers int
	}{{"", 16, 24}, {"-1", 16, 24}, {"3", 3, 11}, {"0", 0, 8}} {
		vars := goodEnv()
		vars["WORKER_CONCURRENCY"] = "8"
		if c.room != "" {
			vars["WORKER_WAIT_ROOM"] = c.room
		}
		cfg, err := LoadConfigFrom(vars)
		if err != nil {
			t.Fatal(err)
		}
		if r, w := cfg.waitRoom(), cfg.workers(); r != c.wantRoom || w != c.workers {
			t.Errorf("WORKER_WAIT_ROOM=%q: room %d, asynq workers %d; want %d, %d", c.room, r, w, c.wantRoom, c.workers)
		}
	}
	for value, want := range map[string]string{"-2": "WORKER_WAIT_ROOM: must be -1", "lots": "WORKER_WAIT_ROOM: cannot be parsed; expected -1"} {
		vars := goodEnv()
		vars["WORKER_WAIT_ROOM"] = value
		if _, err := LoadConfigFrom(vars); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("WORKER_WAIT_ROOM=%s gave %v, want %q", value, err, want)
		}
	}
}

// TestLoadConfigReportsEveryProblemAtOnce: each bad or missing variable is
// named with what is expected, in one error, and no password is shown.
func TestLoadConfigReportsEveryProblemAtOnce(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		want []string // variables that must be named
	}{
		{"nothing set", map[string]string{}, []string{"ASYNQ_REDIS_URL: is required", "REDLOCK_NODES: is required"}},
		{"everything wrong", map[string]string{
			"ASYNQ_REDIS_URL":            "http://:secretpw@broker",
			"REDLOCK_NODES":              "redis://a:1,ftp://:secretpw@b:2",
			"REDLOCK_TTL":                "soon",
			"REDLOCK_NODE_TIMEOUT":       "-1s",
			"REDLOCK_DRIFT_FACTOR":       "0.9",
			"WORKER_CONCURRENCY":         "many",
			"WORKER_QUEUES":              "default:x",
			"WORKER_SHUTDOWN_TIMEOUT":    "0s",
			"WORKER_CONFLICT_POLICY":     "pray",
			"WORKER_READINESS_INTERVAL":  "0s",
			"WORKER_NODE_CHECK_INTERVAL": "often",
			"LOG_LEVEL":                  "loud",
			"LOG_FORMAT":                 "xml",
		}, []string{"ASYNQ_REDIS_URL", "REDLOCK_NODES: node 1", "REDLOCK_TTL", "REDLOCK_NODE_TIMEOUT", "REDLOCK_DRIFT_FACTOR",
			"WORKER_CONCURRENCY", "WORKER_QUEUES", "WORKER_SHUTDOWN_TIMEOUT", "WORKER_CONFLICT_POLICY", "LOG_LEVEL", "LOG_FORMAT",
			"WORKER_READINESS_INTERVAL: must be positive", "WORKER_NODE_CHECK_INTERVAL: cannot be parsed; expected a duration such as 10s"}},
		{"empty values", map[string]string{"ASYNQ_REDIS_URL": "", "REDLOCK_NODES": ""}, []string{"ASYNQ_REDIS_URL: is empty", "REDLOCK_NODES: is empty"}},
		{"node timeout too large for ttl", map[string]string{
			"ASYNQ_REDIS_URL": "redis://broker:6379", "REDLOCK_NODES": "redis://a:1",
			"REDLOCK_TTL": "100ms", "REDLOCK_NODE_TIMEOUT": "50ms",
		}, []string{"REDLOCK_NODE_TIMEOUT: 50ms is not small against REDLOCK_TTL"}},
		{"sentinel without master", map[string]string{
			"ASYNQ_REDIS_URL": "redis-sentinel://:secretpw@s1:26379,s2:26379", "REDLOCK_NODES": "redis://a:1",
		}, []string{"ASYNQ_REDIS_URL", "master"}},
		{"unescaped password characters", map[string]string{
			"ASYNQ_REDIS_URL": "redis://user:secretpw/x@broker:6379", "REDLOCK_NODES": "redis://:secretpw?y@a:1",
		}, []string{"ASYNQ_REDIS_URL: URL cannot be parsed: percent-encode", "REDLOCK_NODES: node 0: URL cannot be parsed: percent-encode"}},
		{"NaN drift and zero wait", map[string]string{
			"ASYNQ_REDIS_URL": "redis://broker:6379", "REDLOCK_NODES": "redis://a:1",
			"REDLOCK_DRIFT_FACTOR": "NaN", "WORKER_CONFLICT_WAIT": "0s",
		}, []string{"REDLOCK_DRIFT_FACTOR", "WORKER_CONFLICT_WAIT"}},
		{"completion window out of range", map[string]string{
			"ASYNQ_REDIS_URL": "redis://broker:6379", "REDLOCK_NODES": "redis://a:1",
			"WORKER_COMPLETION_WINDOW": "-1s",
		}, []string{"WORKER_COMPLETION_WINDOW: must be in [0, 720h0m0s]"}},
		{"limits out of range", map[string]string{
			"ASYNQ_REDIS_URL": "redis://broker:6379", "REDLOCK_NODES": "redis://a:1",
			"WORKER_LIMITS": "tenant:import=0,payment:charge=10,bulk=100000",
		}, []string{"WORKER_LIMITS: bulk: the limit must be in [1, 1024], got 100000", "WORKER_LIMITS: tenant:import: the limit must be in [1, 1024], got 0"}},
		{"queue named twice", map[string]string{
			"ASYNQ_REDIS_URL": "redis://broker:6379", "REDLOCK_NODES": "redis://a:1",
			"WORKER_QUEUES": "critical:6,default:3,critical:1",
		}, []string{`WORKER_QUEUES: queue "critical" is named more than once`}},
		{"bad cluster address", map[string]string{
			"ASYNQ_REDIS_URL": "redis-cluster://:secretpw@c1:7000,c2", "REDLOCK_NODES": "redis://a:1",
		}, []string{`ASYNQ_REDIS_URL: URL redis-cluster://…c1:7000,c2: address "c2" must be host:port`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfigFrom(tc.vars)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			var ce *workerconfig.Error
			if !errors.As(err, &ce) {
				t.Fatalf("not a *workerconfig.Error: %T", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not mention %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "secretpw") {
				t.Fatalf("error leaks a password:\n%s", msg)
			}
			if tc.name == "everything wrong" && len(ce.Problems) < len(tc.want) {
				t.Fatalf("%d problems reported, want at least %d:\n%s", len(ce.Problems), len(tc.want), msg)
			}
		})
	}
}

func TestBrokerForms(t *testing.T) {
	cases := map[string]func(asynq.RedisConnOpt) bool{
		"redis://:pw@h:6379/3": func(o asynq.RedisConnOpt) bool {
			c, ok := o.(asynq.RedisClientOpt)
			return ok && c.Addr == "h:6379" && c.DB == 3 && c.Password == "pw"
		},
		"rediss://h:6380": func(o asynq.RedisConnOpt) bool {
			c, ok := o.(asynq.RedisClientOpt)
			return ok && c.TLSConfig != nil
		},
		"redis-sentinel://:pw@s1:26379,s2:26379?master=mymaster": func(o asynq.RedisConnOpt) bool {
			c, ok := o.(asynq.RedisFailoverClientOpt)
			return ok && c.MasterName == "mymaster" && len(c.SentinelAddrs) == 2
		},
		"redis-cluster://u:pw@c1:7000,c2:7001,c3:7002": func(o asynq.RedisConnOpt) bool {
			c, ok := o.(asynq.RedisClusterClientOpt)
			return ok && len(c.Addrs) == 3 && c.Username == "u" && c.Password == "pw" && c.TLSConfig == nil
		},
		"rediss-cluster://c1:7000": func(o asynq.RedisConnOpt) bool {
			c, ok := o.(asynq.RedisClusterClientOpt)
			return ok && c.TLSConfig != nil
		},
	}
	for url, check := range cases {
		b, err := parseBroker(url, workerconfig.TLSFiles{})
		if err != nil || !check(b.opt) {
			t.Errorf("%s: %#v, %v", url, b.opt, err)
		}
	}
}

func TestMetricsEndpointCanBeTurnedOff(t *testing.T) {
	for _, v := range []string{"", " ", "off", "OFF"} {
		vars := goodEnv()
		vars["METRICS_ADDR"] = v
		cfg, err := LoadConfigFrom(vars)
		if err != nil || cfg.MetricsAddr != "" {
			t.Fatalf("METRICS_ADDR=%q: %q, %v; want the endpoint off", v, cfg.MetricsAddr, err)
		}
	}
	cfg, err := LoadConfigFrom(goodEnv())
	if err != nil || cfg.MetricsAddr != "127.0.0.1:10090" {
		t.Fatalf("unset METRICS_ADDR: %q, %v; want the default", cfg.MetricsAddr, err)
	}
}

// TestLoadConfigSaysOneThingPerMistake: a trailing comma in REDLOCK_NODES
// is an empty entry (not "URL has no scheme"), and a duration that does
// not parse is reported as such, without a second "must be positive".
func TestLoadConfigSaysOneThingPerMistake(t *testing.T) {
	vars := goodEnv()
	vars["REDLOCK_NODES"] = "redis://a:6379,redis://b:6379,"
	vars["REDLOCK_TTL"] = "abc"
	_, err := LoadConfigFrom(vars)
	var ce *workerconfig.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a configuration error", err)
	}
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.Var+": "+p.Message)
	}
	want := []string{
		"REDLOCK_TTL: cannot be parsed; expected a duration such as 30s",
		"REDLOCK_NODES: node 2: empty entry (a stray comma?)",
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant exactly %d", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d: %q, want it to start with %q", i, got[i], w)
		}
	}
}

// TestLoadConfigLimits: WORKER_LIMITS maps task types (colons and all) to
// the limit their handlers get, unless Handle is given its own.
func TestLoadConfigLimits(t *testing.T) {
	vars := goodEnv()
	vars["WORKER_LIMITS"] = "tenant:import=3,payment:charge=10"
	cfg, err := LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Limits) != 2 || cfg.Limits["tenant:import"] != 3 || cfg.Limits["payment:charge"] != 10 {
		t.Fatalf("limits %v", cfg.Limits)
	}
	if len(cfg.limitOf("tenant:import")) != 1 || cfg.limitOf("other") != nil {
		t.Fatal("limitOf: one option for a listed type, none for another")
	}
}

// unusedLocks is a lock client whose node nobody dials: for middleware.New's
// checks of its options.
func unusedLocks(t *testing.T) *redlock.Client {
	node := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = node.Close() })
	locks, err := redlock.New([]redis.UniversalClient{node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	return locks
}

// conflictErr is the error of a task whose lock nodes are unreachable: a
// conflict, requeued, no failure.
func conflictErr(t *testing.T) error {
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	h := middleware.Lock(unusedLocks(t), middleware.ByType(), middleware.Requeue())(noop)
	err := h.ProcessTask(context.Background(), asynq.NewTask("stock:adjust", nil))
	if err == nil || middleware.IsFailure(err) {
		t.Fatalf("a task on unreachable lock nodes: %v, want a conflict", err)
	}
	return err
}

// TestLimitBoundIsTheMiddlewares: LoadConfig's bound on WORKER_LIMITS is
// the middleware's own: the largest limit it lets through is one the
// middleware takes, one more one it refuses.
func TestLimitBoundIsTheMiddlewares(t *testing.T) {
	locks := unusedLocks(t)
	for n, ok := range map[int]bool{maxLimit: true, maxLimit + 1: false} {
		if _, err := middleware.New(locks, middleware.ByType(), middleware.WithLimit(n)); (err == nil) != ok {
			t.Errorf("middleware.New with limit %d: %v; LoadConfig lets it through: %v", n, err, ok)
		}
		vars := goodEnv()
		vars["WORKER_LIMITS"] = fmt.Sprintf("bulk=%d", n)
		if _, err := LoadConfigFrom(vars); (err == nil) != ok {
			t.Errorf("WORKER_LIMITS=bulk=%d: %v", n, err)
		}
	}
}

// TestCompletionWindowBoundIsTheMiddlewares: LoadConfig's bound on
// WORKER_COMPLETION_WINDOW is the middleware's own: the largest window it
// lets through is one the middleware takes, a second more one it refuses.
func TestCompletionWindowBoundIsTheMiddlewares(t *testing.T) {
	locks := unusedLocks(t)
	for d, ok := range map[time.Duration]bool{maxCompletionWindow: true, maxCompletionWindow + time.Second: false} {
		_, err := middleware.New(locks, middleware.ByType(), middleware.WithCompletionWindow(d))
		if (err == nil) != ok {
			t.Errorf("middleware.New with a %v window: %v; LoadConfig lets it through: %v", d, err, ok)
		}
		vars := goodEnv()
		vars["WORKER_COMPLETION_WINDOW"] = d.String()
		if _, err := LoadConfigFrom(vars); (err == nil) != ok {
			t.Errorf("WORKER_COMPLETION_WINDOW=%v: %v", d, err)
		}
	}
}
