package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alicebob/miniredis/v2"
)

// servers are the Redis servers of a run: from the environment, or embedded.
type servers struct {
	broker string   // asynq's broker URL
	nodes  []string // lock node URLs
	store  string   // inventory store URL
	stop   func()
}

// startServers starts embedded servers for whatever the environment does not
// name, and says so.
func startServers(out io.Writer) (*servers, error) {
	var started []*miniredis.Miniredis
	s := &servers{stop: func() {
		for _, m := range started {
			m.Close()
		}
	}}
	embedded := func() (string, error) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // keys expire in real time, as on redis-server
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return "", err
		}
		started = append(started, m)
		return "redis://" + m.Addr(), nil
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
			u, err := embedded()
			if err != nil {
				return fail(err)
			}
			s.nodes = append(s.nodes, u)
		}
		fmt.Fprintln(out, "REDLOCK_NODES not set: 5 embedded in-process lock nodes (real-time expiry)")
	}
	if s.broker = os.Getenv("ASYNQ_REDIS_URL"); s.broker == "" {
		if s.broker, err = embedded(); err != nil {
			return fail(err)
		}
		fmt.Fprintln(out, "ASYNQ_REDIS_URL not set: an embedded in-process asynq broker")
	}
	if s.store = os.Getenv("INVENTORY_STORE_URL"); s.store == "" {
		if s.store, err = embedded(); err != nil {
			return fail(err)
		}
		fmt.Fprintln(out, "INVENTORY_STORE_URL not set: an embedded in-process inventory store")
	}
	return s, nil
}
