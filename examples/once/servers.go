package main

import (
	"time"

	"github.com/asynqlock/asynqlock/redlocktest/embedded"
)

// servers are the run's embedded Redis servers.
type servers struct {
	nodes  []string         // lock node URLs
	broker *embedded.Server // asynq's: stopped and restarted with its keys
	store  string           // the stock store's URL
	stop   func()
}

// startServers starts 3 lock nodes (exact expiry), the broker and the store
// (coarse expiry: their TTLs are asynq's and none of the store's matter,
// and exact expiry would cost each of their commands a walk over all keys).
func startServers() (*servers, error) {
	var started []*embedded.Server
	s := &servers{stop: func() {
		for _, m := range started {
			m.Close()
		}
	}}
	start := func(opts ...embedded.Option) (*embedded.Server, error) {
		m, err := embedded.Start(opts...)
		if err != nil {
			s.stop()
			return nil, err
		}
		started = append(started, m)
		return m, nil
	}
	for range 3 {
		m, err := start()
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, m.URL())
	}
	var err error
	if s.broker, err = start(embedded.WithCoarseExpiry(coarseExpiry)); err != nil {
		return nil, err
	}
	store, err := start(embedded.WithCoarseExpiry(coarseExpiry))
	if err != nil {
		return nil, err
	}
	s.store = store.URL()
	return s, nil
}

const coarseExpiry = 50 * time.Millisecond
