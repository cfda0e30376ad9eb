package main

import (
	"os"
	"strings"
)

// demoServerVars are the servers' addresses: the demo chooses them
// (servers.go reads the same variables to decide whether to start
// embedded servers), so the environment does not override them here.
var demoServerVars = map[string]bool{"ASYNQ_REDIS_URL": true, "REDLOCK_NODES": true}

// workerVarPrefixes name the variables worker.LoadConfig reads, but
// METRICS_ADDR: three replicas in one process cannot share its port.
var workerVarPrefixes = []string{"WORKER_", "REDLOCK_", "OTEL_"}

// withEnviron lays the worker's variables set in environ (os.Environ's
// form) over the demo's own vars, except the servers' addresses: a user's
// WORKER_COMPLETION_WINDOW=0 or WORKER_WAIT_ROOM=32 is used by every
// replica, not silently ignored.
func withEnviron(vars map[string]string, environ []string) map[string]string {
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || demoServerVars[k] || !hasWorkerPrefix(k) {
			continue
		}
		vars[k] = v
	}
	return vars
}

func hasWorkerPrefix(k string) bool {
	for _, p := range workerVarPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// environ is the process's environment (a variable so that tests need
// not change it).
var environ = os.Environ
