package main

import (
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/worker"
)

// TestEnvironOverridesTheDemosWorkerSettings: a worker variable set in the
// environment reaches every replica's configuration; the servers'
// addresses stay the demo's, and other variables are not taken.
func TestEnvironOverridesTheDemosWorkerSettings(t *testing.T) {
	vars := map[string]string{
		"ASYNQ_REDIS_URL":    "redis://127.0.0.1:1",
		"REDLOCK_NODES":      "redis://127.0.0.1:2,redis://127.0.0.1:3,redis://127.0.0.1:4",
		"REDLOCK_TTL":        "10s",
		"WORKER_CONCURRENCY": "8",
		"METRICS_ADDR":       "",
	}
	env := []string{
		"WORKER_COMPLETION_WINDOW=0",
		"WORKER_CONCURRENCY=4",
		"REDLOCK_NODES=redis://127.0.0.1:9",
		"HOME=/root",
	}
	got := withEnviron(vars, env)
	if got["REDLOCK_NODES"] != "redis://127.0.0.1:2,redis://127.0.0.1:3,redis://127.0.0.1:4" {
		t.Errorf("REDLOCK_NODES = %q: the environment replaced the demo's servers", got["REDLOCK_NODES"])
	}
	if _, ok := got["HOME"]; ok {
		t.Error("HOME was taken into the worker's variables")
	}
	cfg, err := worker.LoadConfigFrom(got)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CompletionWindow != 0 || cfg.Concurrency != 4 || cfg.LockTTL != 10*time.Second {
		t.Errorf("completion window %v, concurrency %d, TTL %v; want 0, 4 (the environment's) and 10s (the demo's)",
			cfg.CompletionWindow, cfg.Concurrency, cfg.LockTTL)
	}
}
