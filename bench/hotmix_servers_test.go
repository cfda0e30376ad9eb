package bench

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// hotTrips counts what the middleware observers saw on the hot SKU: trips
// through asynq (parked, requeued, resubmitted) and promotions.
type hotTrips struct {
	mu       sync.Mutex
	trips    int
	promoted int
	actions  map[string]int
	cold     map[string]int // cold SKUs' conflicts by action
}

func (h *hotTrips) observe(e middleware.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !strings.HasSuffix(e.Resource, ":"+hotSKU) {
		if e.Kind == "conflict" {
			if h.cold == nil {
				h.cold = map[string]int{}
			}
			h.cold[e.Action]++
		}
		return
	}
	switch {
	case e.Kind == "promoted":
		h.promoted++
	case e.Kind == "conflict":
		if h.actions == nil {
			h.actions = map[string]int{}
		}
		h.actions[e.Action]++
		switch e.Action {
		case "park", "requeue", "resubmit":
			h.trips++
		}
	}
}

// hotSpan sums the hot handler runs and spans first start to last end.
type hotSpan struct {
	mu          sync.Mutex
	first, last time.Time
	busy        time.Duration
}

func (s *hotSpan) add(start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() || start.Before(s.first) {
		s.first = start
	}
	s.last = max64t(s.last, end)
	s.busy += end.Sub(start)
}

// percent is the share of the hot span during which a hot handler ran.
func (s *hotSpan) percent() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if span := s.last.Sub(s.first); span > 0 {
		return 100 * float64(s.busy) / float64(span)
	}
	return 0
}

func max64t(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// startWorkers runs -bench.hotmixservers worker.New workers with their
// defaults (concurrency set to 8, metrics off) on queue, each with its own
// lock client, until the benchmark ends.
func startWorkers(b *testing.B, cluster *redistest.Cluster, broker *redistest.Node, queue, lockPrefix string, h asynq.Handler, obs func(middleware.Event), fail func(error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	for i := range *hotMixServers {
		cfg, err := worker.LoadConfigFrom(map[string]string{
			"ASYNQ_REDIS_URL":            "redis://" + addrOf(broker),
			"REDLOCK_NODES":              strings.Join(cluster.URLs(), ","),
			"REDLOCK_PREFIX":             lockPrefix,
			"WORKER_CONCURRENCY":         strconv.Itoa(hotMixConcurrency),
			"WORKER_QUEUES":              queue + ":1",
			"METRICS_ADDR":               "off",
			"LOG_LEVEL":                  "error",
			"WORKER_TASK_CHECK_INTERVAL": *hotMixTaskCheck,
		})
		if err != nil {
			b.Fatalf("worker %d config: %v", i, err)
		}
		w, err := worker.New(cfg)
		if err != nil {
			b.Fatalf("worker %d: %v", i, err)
		}
		warmLocks(b, w.Locks(), "warm:"+strconv.Itoa(i)+":")
		if err := w.Handle(taskType, failing(h, fail), middleware.ByField("sku"), middleware.WithObserver(obs)); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				b.Errorf("worker %d: %v", i, err)
			}
		})
	}
}

// startBare runs -bench.hotmixservers asynq servers with asynq's default
// Config (only Concurrency 8 and the queue set) and a bare
// middleware.Lock(lc, ByField("sku")), as a user who configures nothing.
func startBare(b *testing.B, cluster *redistest.Cluster, broker *redistest.Node, queue, lockPrefix string, h asynq.Handler, obs func(middleware.Event), fail func(error)) {
	for i := range *hotMixServers {
		rc := newRedlock(b, cluster, redlock.WithPrefix(lockPrefix))
		warmLocks(b, rc, strconv.Itoa(i)+":")
		mw := middleware.Lock(rc, middleware.ByField("sku"), middleware.WithObserver(obs))
		srv := newServer(b, broker, asynq.Config{Concurrency: hotMixConcurrency, Queues: map[string]int{queue: 1},
			Logger: quietAsynq{}, LogLevel: asynq.FatalLevel})
		if err := srv.Start(failing(mw(h), fail)); err != nil {
			b.Fatalf("start server %d: %v", i, err)
		}
	}
}

// failing reports the handler's real failures (not conflicts).
func failing(h asynq.Handler, fail func(error)) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := h.ProcessTask(ctx, t)
		if err != nil && middleware.IsFailure(err) && !errors.Is(err, asynq.RevokeTask) {
			fail(err)
		}
		return err
	})
}
