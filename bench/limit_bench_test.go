package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// limitBroker: false drains without WithBroker (busy tasks wait in their
// workers, the Wait policy's own way, nothing parked).
var limitBroker = flag.Bool("bench.limitbroker", true, "BenchmarkLimitDrain: park busy tasks through the broker (WithBroker)")

// limitTasks tasks of limitWork each, on one key, drained by three servers.
const (
	limitTasks = 150
	limitWork  = 10 * time.Millisecond
)

// BenchmarkLimitDrain drains limitTasks tasks of limitWork on one key
// through three asynq servers (Concurrency 8, a lock client each), locked
// ByType WithLimit(1), WithLimit(3) and WithLimit(5),
// alternated in one run (the order swaps every iteration), and reports each
// drain's mean time, the most tasks that ran at once with each n (never
// above n), and the medians of the paired ratios n=3/n=1 and n=5/n=1: n
// slots would ideally drain in 1/n of one's time. The machine is shared:
// only the paired ratios mean anything. Run with -benchtime=5x.
func BenchmarkLimitDrain(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	broker := redistest.StartNode(b)
	limits := []int{1, 3, 5}
	took := map[int][]time.Duration{}
	peaks := map[int]int32{}
	var ratios3, ratios5 []float64
	for i := range b.N {
		order := slices.Clone(limits)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		run := map[int]time.Duration{}
		for _, n := range order {
			d, peak := drainOnce(b, cluster, broker, n, i)
			if peak > int32(n) {
				b.Fatalf("limit %d: %d tasks ran at once", n, peak)
			}
			peaks[n] = max(peaks[n], peak)
			run[n] = d
			took[n] = append(took[n], d)
		}
		ratios3 = append(ratios3, float64(run[3])/float64(run[1]))
		ratios5 = append(ratios5, float64(run[5])/float64(run[1]))
	}
	for _, n := range limits {
		var sum time.Duration
		for _, d := range took[n] {
			sum += d
		}
		b.ReportMetric(float64(sum.Milliseconds())/float64(len(took[n])), "n"+strconv.Itoa(n)+"-ms")
		b.ReportMetric(float64(peaks[n]), "n"+strconv.Itoa(n)+"-max-holders")
	}
	b.ReportMetric(median(ratios3), "n3/n1")
	b.ReportMetric(median(ratios5), "n5/n1")
	b.Logf("paired ratios n3/n1 %.2f, n5/n1 %.2f", ratios3, ratios5)
}

// drainOnce enqueues the tasks on a fresh queue, starts the servers and
// returns how long they took to run all, and the most that ran at once.
func drainOnce(b *testing.B, cluster *redistest.Cluster, broker *redistest.Node, n, iter int) (time.Duration, int32) {
	b.Helper()
	queue := freshQueue(fmt.Sprintf("limit%d-%d", n, iter))
	typ := "import:" + queue
	c := asynqClient(b, broker)
	for i := range limitTasks {
		if _, err := c.Enqueue(asynq.NewTask(typ, []byte(strconv.Itoa(i))), asynq.Queue(queue), asynq.MaxRetry(25)); err != nil {
			b.Fatal(err)
		}
	}
	var inside, peak atomic.Int32
	t := newTally(limitTasks)
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		now := inside.Add(1)
		defer inside.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		time.Sleep(limitWork)
		id, _ := strconv.Atoi(string(task.Payload()))
		t.complete(id, time.Now())
		return nil
	})
	var servers []*asynq.Server
	var handlers []asynq.Handler
	for range 3 {
		rc := newRedlock(b, cluster, redlock.WithNodeTimeout(time.Second))
		warmLocks(b, rc, queue)
		opts := []middleware.Option{middleware.WithLimit(n)}
		if *limitBroker {
			opts = append(opts, middleware.WithBroker(nodeClient(b, broker)))
		}
		mw := middleware.Lock(rc, middleware.ByType(), opts...)
		handlers = append(handlers, mw(h))
		servers = append(servers, newServer(b, broker, serverConfig(queue, 8)))
	}
	start := time.Now()
	for i, s := range servers {
		if err := s.Start(handlers[i]); err != nil {
			b.Fatal(err)
		}
	}
	if err := t.wait(mwLimit); err != nil {
		b.Fatalf("limit %d: %v", n, err)
	}
	d := time.Since(start)
	for _, s := range servers {
		s.Shutdown()
	}
	return d, peak.Load()
}
