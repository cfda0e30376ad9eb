package main

import (
	"context"
	"fmt"
	"github.com/asynqlock/asynqlock/internal/embedded"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
)

const replicas = 3

// lockNodes returns the lock node URLs: REDLOCK_NODES, or 5 embedded nodes.
func lockNodes(out io.Writer) ([]string, func(), error) {
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		return strings.Split(env, ","), func() {}, nil
	}
	urls, stop, err := embedded.StartN(5)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(out, "REDLOCK_NODES not set: 5 embedded in-process lock nodes (real-time expiry)")
	return urls, stop, nil
}

// run starts the replicas for ticks seconds and returns how many times each
// tick ran across them.
func run(ctx context.Context, ticks int, out io.Writer) (map[time.Time]int, error) {
	out = &lockedWriter{w: out} // jobs print from cron's goroutines
	urls, stop, err := lockNodes(out)
	if err != nil {
		return nil, err
	}
	defer stop()

	var mu sync.Mutex
	runs := map[time.Time]int{}
	ranBy := map[time.Time][]string{}
	var scheds []*scheduler.Scheduler
	for r := range replicas {
		name := fmt.Sprintf("replica-%d", r+1)
		locks, err := redlock.NewFromURLs(urls)
		if err != nil {
			return nil, err
		}
		defer locks.Close()
		s, err := scheduler.New(locks, scheduler.WithSkew(500*time.Millisecond), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return nil, err
		}
		lag := time.Duration(0)
		if r == replicas-1 {
			lag = 300 * time.Millisecond // a replica whose clock is behind
		}
		err = s.Register("heartbeat", "@every 1s", func(ctx context.Context) error {
			info, _ := scheduler.FromContext(ctx)
			mu.Lock()
			runs[info.Tick]++
			ranBy[info.Tick] = append(ranBy[info.Tick], name)
			mu.Unlock()
			fmt.Fprintf(out, "tick %s ran on %s\n", info.Tick.Format("15:04:05"), name)
			return nil // a job of a few microseconds: the classic double-run trap
		})
		if err != nil {
			return nil, err
		}
		if lag > 0 {
			time.AfterFunc(lag, s.Start)
		} else {
			s.Start()
		}
		scheds = append(scheds, s)
	}
	fmt.Fprintf(out, "%d replicas run the same cron table (@every 1s, skew allowed 500ms); replica-%d lags 300ms\n", replicas, replicas)
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ticks)*time.Second + 500*time.Millisecond):
	}
	for _, s := range scheds {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Stop(sctx)
		cancel()
	}

	mu.Lock()
	defer mu.Unlock()
	var keys []time.Time
	for t := range runs {
		keys = append(keys, t)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Before(keys[j]) })
	once := 0
	for _, t := range keys {
		if runs[t] == 1 {
			once++
		}
	}
	fmt.Fprintf(out, "%d ticks, %d ran exactly once across %d replicas\n", len(keys), once, replicas)
	return runs, nil
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
