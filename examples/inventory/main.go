// Command inventory is the main demo: replicas of a stock-adjustment worker
// serialize read-modify-write updates per SKU with a Redlock lock, so that no
// update is lost; with -nolock the same run shows the lost updates.
//
// With no environment it starts everything in-process: five embedded lock
// nodes and an embedded inventory store, all with real-time expiry. Set
// REDLOCK_NODES (comma-separated redis:// or rediss:// URLs of independent
// masters) and INVENTORY_STORE_URL to use real servers.
//
//	go run ./examples/inventory            # with locks: 0 lost updates
//	go run ./examples/inventory -nolock    # without: lost updates
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

type config struct {
	noLock   bool
	replicas int
	workers  int
	skus     int
	updates  int
	hot      float64
	work     time.Duration
}

func main() {
	var cfg config
	flag.BoolVar(&cfg.noLock, "nolock", false, "run without locks to show lost updates")
	flag.IntVar(&cfg.replicas, "replicas", 3, "worker replicas (each with its own lock client)")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent workers per replica")
	flag.IntVar(&cfg.skus, "skus", 20, "number of SKUs")
	flag.IntVar(&cfg.updates, "updates", 2000, "stock adjustments to apply")
	flag.Float64Var(&cfg.hot, "hot", 0.3, "share of adjustments that hit the hot SKU")
	flag.DurationVar(&cfg.work, "work", time.Millisecond, "time between reading and writing a SKU's stock")
	flag.Parse()
	if err := validate(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	lost, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
	if lost != 0 && !cfg.noLock {
		os.Exit(1)
	}
}

func validate(c config) error {
	var errs []error
	if c.replicas < 1 {
		errs = append(errs, fmt.Errorf("-replicas must be at least 1, got %d", c.replicas))
	}
	if c.workers < 1 {
		errs = append(errs, fmt.Errorf("-workers must be at least 1, got %d", c.workers))
	}
	if c.skus < 2 {
		errs = append(errs, fmt.Errorf("-skus must be at least 2 (one hot, others cold), got %d", c.skus))
	}
	if c.updates < 1 {
		errs = append(errs, fmt.Errorf("-updates must be at least 1, got %d", c.updates))
	}
	if c.hot < 0 || c.hot > 1 {
		errs = append(errs, fmt.Errorf("-hot must be in [0, 1], got %v", c.hot))
	}
	if c.work < 0 {
		errs = append(errs, fmt.Errorf("-work must not be negative, got %v", c.work))
	}
	return errors.Join(errs...)
}

// servers returns the lock node URLs and the store URL, starting embedded
// servers for whatever the environment does not name.
func servers(out io.Writer) (nodes []string, store string, stop func(), err error) {
	var started []*miniredis.Miniredis
	stop = func() {
		for _, s := range started {
			s.Close()
		}
	}
	embedded := func() (string, error) {
		s := miniredis.NewMiniRedis()
		s.ClockTTL(true) // keys expire in real time, as on redis-server
		if err := s.StartAddr("127.0.0.1:0"); err != nil {
			return "", err
		}
		started = append(started, s)
		return "redis://" + s.Addr(), nil
	}
	if env := os.Getenv("REDLOCK_NODES"); env != "" {
		for _, u := range strings.Split(env, ",") {
			nodes = append(nodes, strings.TrimSpace(u))
		}
	} else {
		for range 5 {
			u, err := embedded()
			if err != nil {
				stop()
				return nil, "", nil, err
			}
			nodes = append(nodes, u)
		}
		fmt.Fprintln(out, "REDLOCK_NODES not set: using 5 embedded in-process lock nodes (real-time expiry)")
	}
	if store = os.Getenv("INVENTORY_STORE_URL"); store == "" {
		if store, err = embedded(); err != nil {
			stop()
			return nil, "", nil, err
		}
		fmt.Fprintln(out, "INVENTORY_STORE_URL not set: using an embedded in-process inventory store")
	}
	return nodes, store, stop, nil
}

type adjustment struct {
	sku   string
	delta int64
}

func run(ctx context.Context, cfg config, out io.Writer) (lost int64, err error) {
	nodes, storeURL, stop, err := servers(out)
	if err != nil {
		return 0, err
	}
	defer stop()
	opt, err := redis.ParseURL(storeURL)
	if err != nil {
		return 0, fmt.Errorf("INVENTORY_STORE_URL: %w", err)
	}
	store := redis.NewClient(opt)
	defer store.Close()

	skus := make([]string, cfg.skus)
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%03d", i)
	}
	skus[0] = "SKU-HOT"
	for _, s := range skus {
		if err := store.Set(ctx, "stock:"+s, 1000, 0).Err(); err != nil {
			return 0, fmt.Errorf("inventory store: %w", err)
		}
	}

	// The adjustments and what each SKU must end at.
	rng := rand.New(rand.NewPCG(42, 7))
	expected := map[string]int64{}
	work := make(chan adjustment, cfg.updates)
	for range cfg.updates {
		sku := skus[0]
		if rng.Float64() >= cfg.hot {
			sku = skus[1+rng.IntN(len(skus)-1)]
		}
		delta := int64(rng.IntN(11) - 5)
		if delta == 0 {
			delta = 1
		}
		expected[sku] += delta
		work <- adjustment{sku, delta}
	}
	close(work)

	mode := "with a Redlock lock per SKU"
	if cfg.noLock {
		mode = "WITHOUT locks"
	}
	fmt.Fprintf(out, "applying %d adjustments over %d SKUs (%.0f%% on SKU-HOT), %d replicas x %d workers, %s\n",
		cfg.updates, cfg.skus, cfg.hot*100, cfg.replicas, cfg.workers, mode)

	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.replicas*cfg.workers)
	start := time.Now()
	for r := range cfg.replicas {
		locks, err := redlock.NewFromURLs(nodes, redlock.WithLogger(slog.Default()))
		if err != nil {
			return 0, fmt.Errorf("REDLOCK_NODES: %w", err)
		}
		defer locks.Close()
		for range cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for a := range work {
					if err := apply(ctx, cfg, locks, store, a); err != nil {
						errs <- fmt.Errorf("replica %d: %s: %w", r, a.sku, err)
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-tick.C:
			fmt.Fprintf(out, "  %5d / %d applied (%v)\n", done.Load(), cfg.updates, time.Since(start).Round(100*time.Millisecond))
		}
	}
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	if err != nil {
		return 0, err
	}

	fmt.Fprintf(out, "\n%-8s %9s %9s %6s\n", "SKU", "expected", "actual", "lost")
	for _, s := range skus {
		got, err := store.Get(ctx, "stock:"+s).Int64()
		if err != nil {
			return 0, fmt.Errorf("inventory store: %w", err)
		}
		want := 1000 + expected[s]
		diff := want - got
		if diff < 0 {
			diff = -diff
		}
		lost += diff
		fmt.Fprintf(out, "%-8s %9d %9d %6d\n", s, want, got, diff)
	}
	fmt.Fprintf(out, "\n%d adjustments in %v; stock off by %d units in total (lost updates) %s\n",
		cfg.updates, time.Since(start).Round(time.Millisecond), lost, mode)
	return lost, nil
}

// apply is the worker's handler: a read-modify-write of one SKU's stock,
// which is only correct if no other worker touches the SKU meanwhile.
func apply(ctx context.Context, cfg config, locks *redlock.Client, store *redis.Client, a adjustment) error {
	update := func(ctx context.Context) error {
		stock, err := store.Get(ctx, "stock:"+a.sku).Int64()
		if err != nil {
			return err
		}
		time.Sleep(cfg.work) // business logic between read and write
		return store.Set(ctx, "stock:"+a.sku, stock+a.delta, 0).Err()
	}
	if cfg.noLock {
		return update(ctx)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return locks.Run(wait, "sku:"+a.sku, 5*time.Second, update)
}
