package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/hibiken/asynq"
)

// misconfigured returns the lock nodes of the last check that refuse the
// worker for good (a wrong password, NOAUTH, an ACL denial, an unknown
// command, a Redis Cluster member given as a single server), each named
// by its URL with the password masked; nil when there is none.
func (w *Worker) misconfigured() error {
	reports, _, _ := w.nodes.snapshot()
	names := w.cfg.locks().Names()
	var errs []error
	for _, r := range reports {
		if r.Misconfigured != nil && r.Node < len(names) {
			errs = append(errs, fmt.Errorf("lock node %d (%s): %w", r.Node, names[r.Node], r.Misconfigured))
		}
	}
	return errors.Join(errs...)
}

// brokerMisconfigured returns the first probe's broker error when no retry
// cures it (authentication or an ACL denial), nil otherwise.
func (w *Worker) brokerMisconfigured() error {
	w.health.mu.Lock()
	err := w.health.brokerErr
	w.health.mu.Unlock()
	if err == nil {
		return nil
	}
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "ERR AUTH", "ERR Client sent AUTH"} {
		if strings.HasPrefix(err.Error(), p) {
			return fmt.Errorf("broker %s (ASYNQ_REDIS_URL): %w: check the user name and password in the URL", w.health.brokerAddr, err)
		}
	}
	return nil
}

// warnFewNodes says at Warn, once at start, that one or two lock nodes
// tolerate no failure.
func (w *Worker) warnFewNodes() {
	switch n := len(w.cfg.RedlockNodes); n {
	case 1:
		w.log.Warn("one lock node: no failure tolerated; while it is down no task can take a lock; use 3 independent nodes (1 may fail) or 5 (2 may fail)", "lock_nodes", n)
	case 2:
		w.log.Warn("two lock nodes: no failure tolerated; the quorum is 2, so either one down stops every lock; use 3 independent nodes (1 may fail) or 5 (2 may fail)", "lock_nodes", n)
	}
}

// brokerPasswordUnused refuses a password in ASYNQ_REDIS_URL for a broker
// that has none (redisurl.UnusedPassword: go-redis's HELLO AUTH passes
// there whatever the password, so the mistake would go unnoticed).
func (w *Worker) brokerPasswordUnused(ctx context.Context) error {
	user, pw := brokerCredentials(w.broker)
	ctx, cancel := context.WithTimeout(ctx, max(w.cfg.ReadinessInterval, time.Second, w.cfg.NodeTimeout))
	defer cancel()
	err := redisurl.UnusedPassword(ctx, w.ping, user, pw)
	if err == nil {
		return nil
	}
	return fmt.Errorf("broker %s (ASYNQ_REDIS_URL): a password is given but the broker has none configured (it answers %q): remove the password from the URL, or point it at the broker that has one",
		w.health.brokerAddr, strings.SplitN(err.Error(), ".", 2)[0])
}

// brokerCredentials returns the user name and password of the broker's
// connection options.
func brokerCredentials(opt asynq.RedisConnOpt) (user, pw string) {
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		return o.Username, o.Password
	case asynq.RedisFailoverClientOpt:
		return o.Username, o.Password
	case asynq.RedisClusterClientOpt:
		return o.Username, o.Password
	}
	return "", ""
}
