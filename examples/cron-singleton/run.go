package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/robfig/cron/v3"
)

// replica is one process of the service and how late its cron delivers
// ticks. (Replicas in one process share one clock: a clock ahead of the
// lock nodes' is the scheduler's and gocronlock's tests' to simulate.)
type replica struct {
	name  string
	delay time.Duration
}

var replicas = []replica{
	{name: "replica-1"},
	{name: "replica-2", delay: 700 * time.Millisecond}, // its ticks arrive 700ms late
	{name: "replica-3", delay: 300 * time.Millisecond}, // a loaded replica: its ticks arrive 300ms late
}

// lockNodes returns the lock node URLs: REDLOCK_NODES, or 5 embedded nodes.
func lockNodes(out io.Writer) ([]string, func(), error) {
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		return strings.Split(env, ","), func() {}, nil
	}
	urls, stop, err := redlocktest.StartNodes(5)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(out, "REDLOCK_NODES not set: 5 embedded in-process lock nodes (real-time expiry)")
	return urls, stop, nil
}

// ledger records, per tick, when each replica's cron fired it (against the
// lock nodes' time) and who ran it.
type ledger struct {
	mu    sync.Mutex
	fired map[time.Time][]string
	ran   map[time.Time][]string
}

// firing notes a replica's delivery of a tick, before Singleton sees it.
func (l *ledger) firing(r replica) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			now := time.Now()
			tick := now.Truncate(time.Second).UTC()
			l.mu.Lock()
			l.fired[tick] = append(l.fired[tick], fmt.Sprintf("%s %+dms", r.name, now.Sub(tick).Milliseconds()))
			l.mu.Unlock()
			j.Run()
		})
	}
}

// start runs the replica's cron: the robfig idiom, Singleton first to see
// the run, its late delivery before it.
func (r replica) start(locks *redlock.Client, l *ledger, logger *slog.Logger) *cron.Cron {
	singleton := scheduler.Singleton(locks, "heartbeat", scheduler.WithLogger(logger))
	job := scheduler.Func(func(ctx context.Context) error {
		run, _ := scheduler.FromContext(ctx)
		l.mu.Lock()
		l.ran[run.Tick.UTC()] = append(l.ran[run.Tick.UTC()], r.name)
		l.mu.Unlock()
		return nil // a job of a few microseconds: the classic double-run trap
	})
	c := cron.New(cron.WithSeconds())
	chain := cron.NewChain(delay(r.delay), l.firing(r), singleton).Then(job)
	_, _ = c.AddJob("* * * * * *", chain) // exactly as a robfig user writes it
	c.Start()
	return c
}

// delay delivers each run d late.
func delay(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(d); j.Run() })
	}
}

// run starts the replicas for ticks seconds and returns how many times each
// tick ran across them.
func run(ctx context.Context, ticks int, out io.Writer) (map[time.Time]int, error) {
	out = &lockedWriter{w: out} // replicas write from cron's goroutines
	urls, stop, err := lockNodes(out)
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintln(out, `3 replicas, each: cron.New(cron.WithSeconds()), AddJob("* * * * * *", cron.NewChain(scheduler.Singleton(locks, "heartbeat")).Then(job))`)
	fmt.Fprintln(out, "replica-2's ticks arrive 700ms late, replica-3's 300ms late; default skew 1s")
	l := &ledger{fired: map[time.Time][]string{}, ran: map[time.Time][]string{}}
	// One logger, one format, for the lock clients and the schedulers
	// alike: a library logs only where it is told to.
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var crons []*cron.Cron
	for _, r := range replicas {
		// The embedded nodes share this process's CPU with the replicas: a
		// patient node timeout keeps a slow answer on a loaded machine from
		// passing for an outage (the tick would then run nowhere).
		locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithLogger(logger))
		if err != nil {
			return nil, err
		}
		defer locks.Close()
		crons = append(crons, r.start(locks, l, logger))
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ticks)*time.Second + 500*time.Millisecond):
	}
	for _, c := range crons {
		<-c.Stop().Done()
	}
	return l.print(out), nil
}

// print shows each tick's firings and runs, and returns the runs per tick.
func (l *ledger) print(out io.Writer) map[time.Time]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	runs := map[time.Time]int{}
	var keys []time.Time
	for t := range l.fired {
		keys = append(keys, t)
	}
	slices.SortFunc(keys, func(a, b time.Time) int { return a.Compare(b) })
	once := 0
	for _, t := range keys {
		runs[t] = len(l.ran[t])
		if runs[t] == 1 {
			once++
		}
		fmt.Fprintf(out, "tick %s  fired by %s  ran on %v\n", t.UTC().Format("15:04:05"), strings.Join(l.fired[t], ", "), l.ran[t])
	}
	fmt.Fprintf(out, "%d ticks, %d ran exactly once across %d replicas\n", len(keys), once, len(replicas))
	return runs
}

// lockedWriter serializes writes from concurrent goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
