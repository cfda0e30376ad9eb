package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlocktest/embedded"
)

// embeddedNodeTimeout bounds each call to an embedded lock node (see
// newReplica).
const embeddedNodeTimeout = 3 * time.Second

// coarseExpiry is the expiry tick of the embedded broker and store: exact
// expiry would cost each of their commands a sorted walk over all their keys
// (thousands of queued tasks in the broker), most of the demo's CPU beside
// the Lua scripts; their TTLs (asynq's, the store's hour) need no precision.
// The lock nodes keep exact expiry.
const coarseExpiry = 50 * time.Millisecond

// servers are the Redis servers of a run: from the environment, or embedded.
type servers struct {
	broker string   // asynq's broker URL
	nodes  []string // lock node URLs
	// embeddedNodes is set when the lock nodes are embedded (in-process).
	embeddedNodes bool
	store         string // inventory store URL
	stop          func()
}

// startServers starts embedded servers for whatever the environment does not
// name, and says so.
func startServers(out io.Writer) (*servers, error) {
	var started []*embedded.Server
	s := &servers{stop: func() {
		for _, m := range started {
			m.Close()
		}
	}}
	start := func(opts ...embedded.Option) (string, error) {
		m, err := embedded.Start(opts...) // keys expire in real time, as on redis-server
		if err != nil {
			return "", err
		}
		started = append(started, m)
		return m.URL(), nil
	}
	fail := func(err error) (*servers, error) {
		s.stop()
		return nil, err
	}
	var err error
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		for _, u := range strings.Split(env, ",") {
			s.nodes = append(s.nodes, strings.TrimSpace(u))
		}
	} else {
		for range 5 {
			u, err := start()
			if err != nil {
				return fail(err)
			}
			s.nodes = append(s.nodes, u)
		}
		s.embeddedNodes = true
		fmt.Fprintf(out, "REDLOCK_NODES not set: 5 embedded in-process lock nodes (real-time expiry, node timeout %v)\n", embeddedNodeTimeout)
	}
	if s.broker = os.Getenv("ASYNQ_REDIS_URL"); s.broker == "" {
		if s.broker, err = start(embedded.WithCoarseExpiry(coarseExpiry)); err != nil {
			return fail(err)
		}
		fmt.Fprintln(out, "ASYNQ_REDIS_URL not set: an embedded in-process asynq broker")
	}
	if s.store = os.Getenv("INVENTORY_STORE_URL"); s.store == "" {
		if s.store, err = start(embedded.WithCoarseExpiry(coarseExpiry)); err != nil {
			return fail(err)
		}
		fmt.Fprintln(out, "INVENTORY_STORE_URL not set: an embedded in-process inventory store")
	}
	return s, nil
}
