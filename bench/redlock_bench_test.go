package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// firstError keeps the first error of a group of goroutines and stops the
// group by cancelling its context.
type firstError struct {
	mu     sync.Mutex
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		f.cancel()
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// stamp makes keys unique per sub-benchmark invocation: the framework calls a
// sub-benchmark more than once (b.N = 1 first), and contenders must never
// see each other's keys.
func stamp(name string) string {
	return name + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// BenchmarkAcquireRelease measures the latency of one uncontended lock and
// unlock on a new key, from one goroutine: a single attempt (TryAcquire, a
// new redsync Mutex and TryLock), or asynqlock's Acquire
// (asynqlock-acquire), then a release. Reports p50 and p99 of the
// per-operation latency and allocations per operation. ping-quorum-floor
// is two rounds of PINGs decided at a quorum: the floor of these nodes.
func BenchmarkAcquireRelease(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	for _, ct := range append(lockContenders, pingQuorum) {
		b.Run(ct.name, func(b *testing.B) {
			l := ct.open(b, cluster)(0)
			ctx, cancel := context.WithTimeout(b.Context(), opBudget)
			defer cancel()
			prefix := "ar:" + stamp(ct.name) + ":"
			for i := range 20 { // open connections, load scripts
				if err := l.once(ctx, prefix+"warm"+strconv.Itoa(i)); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
			}
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = prefix + strconv.Itoa(i)
			}
			lat := make([]time.Duration, b.N)
			deadline := time.Now().Add(opBudget)

			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if t0.After(deadline) {
					b.Fatalf("op %d: still running after %v", i, opBudget)
				}
				if err := l.once(ctx, keys[i]); err != nil {
					b.Fatalf("op %d: %v", i, err)
				}
				lat[i] = time.Since(t0)
			}
			b.StopTimer()

			s := sortedCopy(lat)
			b.ReportMetric(micros(percentile(s, 0.50)), "p50-µs")
			b.ReportMetric(micros(percentile(s, 0.99)), "p99-µs")
		})
	}
}

// distinctWorkers is the number of goroutines of BenchmarkDistinctKeys.
const distinctWorkers = 32

// BenchmarkDistinctKeys measures throughput without contention: 32
// goroutines, each on its own key, lock and unlock in a loop, b.N operations
// in all; asynqlock once with TryAcquire (one attempt) and once with Acquire
// (asynqlock-acquire). Reports operations per second, the p50 and p99 of
// one lock+unlock's latency amid the 32, allocations per operation, and
// CPU time per operation of this process (go-cpu-µs/op) and
// of the five redis-servers together (redis-cpu-µs/op): on a loaded machine
// the CPU figures move far less than the wall-clock ones.
func BenchmarkDistinctKeys(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	for _, ct := range lockContenders {
		b.Run(ct.name, func(b *testing.B) {
			run := distinctRunner(b, cluster, ct)
			if _, err := run(4 * distinctWorkers); err != nil { // open connections, load scripts
				b.Fatalf("warm-up: %v", err)
			}

			b.ReportAllocs()
			b.ResetTimer()
			srvCPU0, cpu0 := serversCPU(b, cluster.Nodes...), processCPU()
			start := time.Now()
			lat, err := run(int64(b.N))
			elapsed := time.Since(start)
			cpu1, srvCPU1 := processCPU(), serversCPU(b, cluster.Nodes...)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
			slices.Sort(lat)
			b.ReportMetric(micros(percentile(lat, 0.50)), "p50-µs")
			b.ReportMetric(micros(percentile(lat, 0.99)), "p99-µs")
			b.ReportMetric(micros(cpu1-cpu0)/float64(b.N), "go-cpu-µs/op")
			b.ReportMetric(micros(srvCPU1-srvCPU0)/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// distinctRunner opens ct over cluster with distinctWorkers goroutines on
// keys of their own; its result runs total lock+unlock operations among
// them and returns each one's latency, or the first error.
func distinctRunner(b *testing.B, cluster *redistest.Cluster, ct contender) func(total int64) ([]time.Duration, error) {
	l := ct.open(b, cluster)(0)
	prefix := "dk:" + stamp(ct.name) + ":"
	type handle struct {
		lock   lockFunc
		unlock unlockFunc
	}
	hs := make([]handle, distinctWorkers)
	for g := range hs {
		hs[g].lock, hs[g].unlock = l.handle(prefix+strconv.Itoa(g), false)
	}
	return func(total int64) ([]time.Duration, error) {
		ctx, cancel := context.WithTimeout(b.Context(), opBudget)
		defer cancel()
		fe := &firstError{cancel: cancel}
		var next atomic.Int64
		var wg sync.WaitGroup
		// lat[i] is the i-th lock+unlock's latency, whichever goroutine ran it.
		lat := make([]time.Duration, total)
		for g, h := range hs {
			wg.Go(func() {
				for i := next.Add(1); i <= total; i = next.Add(1) {
					if err := ctx.Err(); err != nil {
						fe.set(fmt.Errorf("goroutine %d: stopped: %w", g, err))
						return
					}
					t0 := time.Now()
					if err := h.lock(ctx); err != nil {
						fe.set(fmt.Errorf("goroutine %d: lock: %w", g, err))
						return
					}
					if err := h.unlock(ctx); err != nil {
						fe.set(fmt.Errorf("goroutine %d: unlock: %w", g, err))
						return
					}
					lat[i-1] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		return lat, fe.get()
	}
}

// alternatedRounds is how many turns each contender of
// BenchmarkUncontendedTurns takes.
const alternatedRounds = 5

// BenchmarkUncontendedTurns is BenchmarkDistinctKeys's load with the
// contenders taking turns: asynqlock with TryAcquire, with Acquire, then
// redsync fail-fast, b.N operations each, 5 rounds. A VM's load drifts
// over the seconds that separate two sub-benchmarks; within one round the
// contenders meet about the same machine. Reports each contender's median
// ops/s over the rounds, and the median over the rounds of asynqlock's
// ops/s over redsync fail-fast's in the same round (x-redsync-ff).
func BenchmarkUncontendedTurns(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	cts := []contender{contenders[0], asynqlockAcquire, contenders[2]}
	runs := make([]func(int64) ([]time.Duration, error), len(cts))
	for i, ct := range cts {
		runs[i] = distinctRunner(b, cluster, ct)
		if _, err := runs[i](4 * distinctWorkers); err != nil {
			b.Fatalf("%s: warm-up: %v", ct.name, err)
		}
	}
	rates := make([][]float64, len(cts))
	b.ResetTimer()
	for range alternatedRounds {
		for i, run := range runs {
			start := time.Now()
			if _, err := run(int64(b.N)); err != nil {
				b.Fatalf("%s: %v", cts[i].name, err)
			}
			rates[i] = append(rates[i], float64(b.N)/time.Since(start).Seconds())
		}
	}
	b.StopTimer()
	ff := rates[len(cts)-1]
	for i, ct := range cts {
		b.ReportMetric(median(rates[i]), ct.name+"-ops/s")
		if i == len(cts)-1 {
			continue
		}
		ratio := make([]float64, len(ff))
		for r := range ff {
			ratio[r] = rates[i][r] / ff[r]
		}
		b.ReportMetric(median(ratio), ct.name+"-x-redsync-ff")
	}
}

// median is the middle value of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

const (
	// hotWorkers contend for the one key of BenchmarkHotKey.
	hotWorkers = 8
	// hold is how long a hot-key worker keeps the lock.
	hold = 5 * time.Millisecond
)

// BenchmarkHotKey measures hand-off on one contended key: 8 workers each
// loop acquire (waiting), hold 5ms, release, for -bench.hotfor (3s) per
// contender whatever b.N is: run it with -benchtime=1x. Reports the share of
// wall time the lock was held (busy-%: the sum of hold intervals, from the
// acquire call's return to the release call, over wall time), acquire wait
// percentiles, hand-offs per second, and fairness and allocation figures.
//
// asynqlock runs twice: one Client shared by the 8 workers (its in-process
// FIFO queue on, the default), and asynqlock-8clients, one Client per worker
// over its own connections, as 8 processes would. redsync runs one Redsync
// with one Mutex per worker, Lock with WithTries(1000).
func BenchmarkHotKey(b *testing.B) {
	cluster := redistest.StartCluster(b, nodes)
	for _, ct := range []contender{contenders[0], asynqlockPerWorker, contenders[1], contenders[2]} {
		b.Run(ct.name, func(b *testing.B) { runHotKey(b, cluster, ct) })
	}
}

type hotWorker struct {
	lock     lockFunc
	unlock   unlockFunc
	waits    []time.Duration // acquire waits, censored ones included
	busy     time.Duration   // sum of hold intervals
	acquires int
	censored int // waits cut short by the end of the run
}

func runHotKey(b *testing.B, cluster *redistest.Cluster, ct contender) {
	libFor := ct.open(b, cluster)
	key := "hot:" + stamp(ct.name)
	bg, cancelBg := context.WithTimeout(b.Context(), opBudget)
	defer cancelBg()

	ws := make([]*hotWorker, hotWorkers)
	for i := range ws {
		lock, unlock := libFor(i).handle(key, true)
		ws[i] = &hotWorker{lock: lock, unlock: unlock}
		// Warm-up, one worker at a time: connections, scripts.
		if err := lock(bg); err != nil {
			b.Fatalf("warm-up worker %d: lock: %v", i, err)
		}
		if err := unlock(bg); err != nil {
			b.Fatalf("warm-up worker %d: unlock: %v", i, err)
		}
	}

	maxIters := int(*hotFor/hold) + 1 // each iteration sleeps hold at least
	runCtx, stop := context.WithTimeout(bg, *hotFor)
	defer stop()
	fe := &firstError{cancel: stop}
	var holders atomic.Int32 // mutual-exclusion check
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)

	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			for range maxIters {
				if runCtx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := w.lock(runCtx)
				t1 := time.Now()
				if err != nil {
					if runCtx.Err() != nil && fe.get() == nil {
						w.waits = append(w.waits, t1.Sub(t0))
						w.censored++
						return
					}
					fe.set(fmt.Errorf("worker %d: lock after %v: %w", i, t1.Sub(t0), err))
					return
				}
				w.waits = append(w.waits, t1.Sub(t0))
				if n := holders.Add(1); n != 1 {
					fe.set(fmt.Errorf("worker %d: mutual exclusion broken: %d holders", i, n))
				}
				time.Sleep(hold)
				holders.Add(-1)
				t2 := time.Now()
				w.busy += t2.Sub(t1)
				w.acquires++
				if err := w.unlock(bg); err != nil {
					fe.set(fmt.Errorf("worker %d: unlock: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err := fe.get(); err != nil {
		b.Fatal(err)
	}

	var busy time.Duration
	var waits []time.Duration
	acquires, censored, minAcq := 0, 0, int(^uint(0)>>1)
	for _, w := range ws {
		busy += w.busy
		waits = append(waits, w.waits...)
		acquires += w.acquires
		censored += w.censored
		minAcq = min(minAcq, w.acquires)
	}
	if acquires == 0 {
		b.Fatalf("no acquisition in %v", wall)
	}
	s := sortedCopy(waits)
	b.ReportMetric(100*busy.Seconds()/wall.Seconds(), "busy-%")
	b.ReportMetric(millis(percentile(s, 0.50)), "p50-wait-ms")
	b.ReportMetric(millis(percentile(s, 0.99)), "p99-wait-ms")
	b.ReportMetric(millis(s[len(s)-1]), "max-wait-ms")
	b.ReportMetric(float64(acquires)/wall.Seconds(), "handoffs/s")
	b.ReportMetric(float64(minAcq), "min-acq/worker")
	b.ReportMetric(float64(censored), "unserved")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(acquires), "allocs/handoff")
}
