package worker

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
)

// repeatedQueues reports a queue named twice in WORKER_QUEUES: the map it
// is parsed into would keep only the last priority, silently.
func repeatedQueues(raw string) []problem {
	seen := map[string]bool{}
	var ps []problem
	for pair := range strings.SplitSeq(raw, ",") {
		name, _, _ := strings.Cut(pair, ":")
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if seen[name] {
			ps = append(ps, problem{Var: "WORKER_QUEUES", Message: fmt.Sprintf("queue %q is named more than once; give each queue one priority", name)})
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
	"WORKER_WAIT_ROOM":                   "-1 (twice WORKER_CONCURRENCY), 0 or a positive integer",
	"WORKER_QUEUES":                      `queue:priority pairs such as "critical:6,default:3"`,
	"WORKER_STRICT_PRIORITY":             "true or false",
	"WORKER_LOCKS_PAGE":                  "true or false",
	"WORKER_SHUTDOWN_TIMEOUT":            "a duration such as 30s",
	"WORKER_CONFLICT_WAIT":               "a duration such as 2s",
	"WORKER_COMPLETION_WINDOW":           "a duration such as 1h (0: no completion records)",
	"WORKER_TASK_CHECK_INTERVAL":         "a duration such as 250ms",
	"WORKER_DELAYED_TASK_CHECK_INTERVAL": "a duration such as 250ms",
	"WORKER_READINESS_INTERVAL":          "a duration such as 1s",
	"WORKER_NODE_CHECK_INTERVAL":         "a duration such as 10s",
	"ASYNQ_REDIS_URL":                    "a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL",
	"REDLOCK_NODES":                      "a comma-separated list of redis://, rediss:// or redis-cluster:// URLs",
}

// problemOf turns an env error into a problem naming the variable.
func problemOf(err error) problem {
	var notSet env.VarIsNotSetError
	var empty env.EmptyVarError
	var parse env.ParseError
	switch {
	case errors.As(err, &notSet):
		return problem{Var: notSet.Key, Message: "is required and not set; expected " + expectations[notSet.Key]}
	case errors.As(err, &empty):
		return problem{Var: empty.Key, Message: "is empty; expected " + expectations[empty.Key]}
	case errors.As(err, &parse):
		key := envKey(parse.Name)
		msg := "cannot be parsed; expected " + expectations[key]
		if !secretVars[key] {
			msg += fmt.Sprintf(" (%v)", parse.Err)
		}
		return problem{Var: key, Message: msg}
	}
	return problem{Var: "environment", Message: err.Error()}
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
