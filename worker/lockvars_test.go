package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
)

// loadLockConfig is how tools on the lock nodes alone (worker/cmd/asynqlock) read
// the environment: the worker's configuration, problems in the lock
// variables only.
func loadLockConfig(vars map[string]string) (Config, error) {
	cfg, err := LoadConfigFrom(vars)
	return cfg, workerconfig.Only(err, "REDLOCK_", "LOG_")
}

// TestLockVariablesAlone: tools on the lock nodes do not need the broker's
// URL nor valid worker variables, but bad lock variables are reported.
func TestLockVariablesAlone(t *testing.T) {
	cfg, err := loadLockConfig(map[string]string{
		"REDLOCK_NODES":  "redis://a:1,redis://b:1,redis://c:1",
		"REDLOCK_PREFIX": "p:",
		"WORKER_QUEUES":  "not a queue list",
	})
	if err != nil {
		t.Fatalf("lock variables only: %v", err)
	}
	if len(cfg.RedlockNodes) != 3 || cfg.LockPrefix != "p:" {
		t.Fatalf("config %+v", cfg)
	}
	_, err = loadLockConfig(map[string]string{"REDLOCK_NODES": "redis://a:1", "REDLOCK_NODE_TIMEOUT": "soon"})
	var ce *workerconfig.Error
	if !errors.As(err, &ce) || len(ce.Problems) == 0 {
		t.Fatalf("bad node timeout: %v", err)
	}
	for _, p := range ce.Problems {
		if p.Var != "REDLOCK_NODE_TIMEOUT" {
			t.Fatalf("problem %+v reported; only REDLOCK_NODE_TIMEOUT is wrong", p)
		}
	}
	if _, err := loadLockConfig(map[string]string{}); err == nil || !strings.Contains(err.Error(), "REDLOCK_NODES") {
		t.Fatalf("no nodes: %v", err)
	}
}

func TestNodeNamesMaskPasswords(t *testing.T) {
	got := (&Config{RedlockNodes: []string{"redis://u:s3cret@a:1/2", "redis://b:1", "redis://%zz"}}).locks().Names()
	if got[0] != "redis://u:xxxxx@a:1/2" || got[1] != "redis://b:1" || strings.Contains(got[2], "zz") {
		t.Fatalf("names %q", got)
	}
}
