package worker

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/asynqlock/asynqlock/redlock"
)

// LoadLockConfig reads the variables the lock client needs (REDLOCK_* and
// LOG_*) from the environment, as LoadConfig does, for tools that talk to the
// lock nodes only (cmd/asynqlock): the broker's and the worker's variables
// may be missing, and problems in them are not reported.
func LoadLockConfig() (Config, error) {
	return LoadLockConfigFrom(environ())
}

// LoadLockConfigFrom is LoadLockConfig over the given variables.
func LoadLockConfigFrom(vars map[string]string) (Config, error) {
	cfg, err := LoadConfigFrom(vars)
	ce, ok := err.(*ConfigError)
	if !ok {
		return cfg, err
	}
	var kept []Problem
	for _, p := range ce.Problems {
		if strings.HasPrefix(p.Var, "REDLOCK_") || strings.HasPrefix(p.Var, "LOG_") {
			kept = append(kept, p)
		}
	}
	if len(kept) > 0 {
		return cfg, &ConfigError{Problems: kept}
	}
	return cfg, nil
}

// NewLockClient builds a lock client over cfg's nodes with cfg's node
// timeout, drift factor and key prefix, as the worker's own: tools built on
// it see the locks the workers take. opts come after those.
func NewLockClient(cfg Config, opts ...redlock.Option) (*redlock.Client, error) {
	all := append([]redlock.Option{
		redlock.WithNodeTimeout(cfg.NodeTimeout),
		redlock.WithDriftFactor(cfg.DriftFactor),
		redlock.WithPrefix(cfg.LockPrefix),
	}, opts...)
	c, err := redlock.NewFromURLs(cfg.nodeURLs(), all...)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{{"REDLOCK_NODES", err.Error()}}}
	}
	return c, nil
}

// NodeNames are the REDLOCK_NODES URLs as they may be shown: passwords
// masked, by node index. Two spellings of one server differ here while
// their addresses may not (two databases of one server).
func NodeNames(cfg Config) []string {
	out := make([]string, len(cfg.RedlockNodes))
	for i, raw := range cfg.RedlockNodes {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			out[i] = fmt.Sprintf("node %d URL (unparsable)", i)
			continue
		}
		out[i] = u.Redacted()
	}
	return out
}
