package bench

import (
	"context"
	"errors"
	"slices"
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
	cold     map[string]int           // cold SKUs' conflicts by action (the other hot SKUs' are in neither)
	entered  map[string]time.Time     // hot task ID -> when its last run reached the middleware
	acquired map[string]time.Time     // hot task ID -> when its last run got the lock
	handover map[string]int           // the hot SKU's acquisitions after a wait, by Handover
	waits    map[string]time.Duration // task ID -> how long its last run waited for the lock
}

// waitOf returns how long the last run of task id that got its lock waited
// for it.
func (h *hotTrips) waitOf(id string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waits[id]
}

// acquiredAt returns when the run of the hot task id that got the lock got
// it.
func (h *hotTrips) acquiredAt(id string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acquired[id]
}

// enteredAt returns when the run of the hot task id that got the lock
// reached the middleware.
func (h *hotTrips) enteredAt(id string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entered[id]
}

func (h *hotTrips) observe(e middleware.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Kind == "acquired" {
		if h.waits == nil {
			h.waits = map[string]time.Duration{}
		}
		h.waits[e.TaskID] = e.Wait
	}
	if !strings.HasSuffix(e.Resource, ":"+hotSKU) {
		if e.Kind == "conflict" && !slices.ContainsFunc(threeHot, func(sku string) bool { return strings.HasSuffix(e.Resource, ":"+sku) }) {
			if h.cold == nil {
				h.cold = map[string]int{}
			}
			h.cold[e.Action]++
		}
		return
	}
	switch {
	case e.Kind == "acquired":
		if h.entered == nil {
			h.entered = map[string]time.Time{}
		}
		now := time.Now()
		h.entered[e.TaskID] = now.Add(-e.Wait)
		if h.acquired == nil {
			h.acquired, h.handover = map[string]time.Time{}, map[string]int{}
		}
		h.acquired[e.TaskID] = now
		if e.Handover != "" {
			h.handover[e.Handover]++
		}
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

// hotSpan sums the hot handler runs and spans first start to last end; it
// keeps each run, with the server that ran it, to tell hand-overs apart.
type hotSpan struct {
	mu          sync.Mutex
	first, last time.Time
	busy        time.Duration
	runs        []hotRun
}

// hotRun is one hot handler run on server srv (-1: unknown).
type hotRun struct {
	srv                         int
	entry, acquired, start, end time.Time // entry: when the server handed the task to the middleware
}

// serverKey carries the index of the server running a task.
type serverKey struct{}

// onServer tells the handler which server runs it.
func onServer(h asynq.Handler, i int) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return h.ProcessTask(context.WithValue(ctx, serverKey{}, i), t)
	})
}

func serverOf(ctx context.Context) int {
	if i, ok := ctx.Value(serverKey{}).(int); ok {
		return i
	}
	return -1
}

// gaps splits the time between one hot run's end and the next one's start
// by whether the next run was on the same server (a local hand-over) or
// not: their counts and mean gaps. starved counts the next runs that reached
// the middleware only after the previous one ended (nobody was waiting).
func (s *hotSpan) gaps() (local, remote, starved int, localGap, remoteGap time.Duration) {
	s.mu.Lock()
	runs := slices.Clone(s.runs)
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b hotRun) int { return a.start.Compare(b.start) })
	var lsum, rsum time.Duration
	for i := 1; i < len(runs); i++ {
		g := max(0, runs[i].start.Sub(runs[i-1].end))
		if runs[i].entry.After(runs[i-1].end) {
			starved++
		}
		if runs[i].srv == runs[i-1].srv {
			local, lsum = local+1, lsum+g
		} else {
			remote, rsum = remote+1, rsum+g
		}
	}
	if local > 0 {
		localGap = lsum / time.Duration(local)
	}
	if remote > 0 {
		remoteGap = rsum / time.Duration(remote)
	}
	return local, remote, starved, localGap, remoteGap
}

// remoteGapP50 is the median gap before a run on another server.
func (s *hotSpan) remoteGapP50() time.Duration {
	s.mu.Lock()
	runs := slices.Clone(s.runs)
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b hotRun) int { return a.start.Compare(b.start) })
	var g []time.Duration
	for i := 1; i < len(runs); i++ {
		if runs[i].srv != runs[i-1].srv {
			g = append(g, max(0, runs[i].start.Sub(runs[i-1].end)))
		}
	}
	if len(g) == 0 {
		return 0
	}
	return percentile(sortedCopy(g), 0.5)
}

func (s *hotSpan) add(srv int, entry, acquired, start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, hotRun{srv: srv, entry: entry, acquired: acquired, start: start, end: end})
	if s.first.IsZero() || start.Before(s.first) {
		s.first = start
	}
	if end.After(s.last) {
		s.last = end
	}
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

// startWorkers runs -bench.hotmixservers worker.New workers with their
// defaults (concurrency set to 8, metrics off) on queue, each with its own
// lock client, until the benchmark ends.
func startWorkers(b *testing.B, cluster *redistest.Cluster, broker *redistest.Node, queue, lockPrefix string, h asynq.Handler, obs func(middleware.Event), fail func(error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	urls := make([]string, len(cluster.Nodes))
	for i, n := range cluster.Nodes {
		urls[i] = "redis://" + addrOf(n)
	}
	for i := range *hotMixServers {
		cfg, err := worker.LoadConfigFrom(map[string]string{
			"ASYNQ_REDIS_URL":            "redis://" + addrOf(broker),
			"REDLOCK_NODES":              strings.Join(urls, ","),
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
		if err := w.Handle(taskType, failing(onServer(h, i), fail), middleware.ByField("sku"), middleware.WithObserver(obs)); err != nil {
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
		if err := srv.Start(failing(mw(onServer(h, i)), fail)); err != nil {
			b.Fatalf("start server %d: %v", i, err)
		}
	}
}

// startPlain runs -bench.hotmixservers asynq servers configured as
// worker.New configures them (concurrency 8, its task check intervals), with
// no lock: plain-with-3-hot, the baseline of the cold tasks' latency. Its
// hot tasks run at once, side by side, and lose updates.
func startPlain(b *testing.B, _ *redistest.Cluster, broker *redistest.Node, queue, _ string, h asynq.Handler, _ func(middleware.Event), fail func(error)) {
	url := "redis://" + addrOf(broker) // required, not dialed: only the intervals are used
	cfg, err := worker.LoadConfigFrom(map[string]string{"ASYNQ_REDIS_URL": url, "REDLOCK_NODES": url,
		"WORKER_TASK_CHECK_INTERVAL": *hotMixTaskCheck})
	if err != nil {
		b.Fatalf("worker defaults: %v", err)
	}
	for i := range *hotMixServers {
		srv := newServer(b, broker, asynq.Config{Concurrency: hotMixConcurrency, Queues: map[string]int{queue: 1},
			TaskCheckInterval: cfg.TaskCheckInterval, DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
			Logger: quietAsynq{}, LogLevel: asynq.FatalLevel})
		if err := srv.Start(failing(onServer(h, i), fail)); err != nil {
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
