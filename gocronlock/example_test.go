package gocronlock_test

import (
	"fmt"
	"log"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/gocronlock"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/go-co-op/gocron/v2"
)

// Two replicas run the same gocron job every second, their schedulers
// started 300ms apart (so their timers fire at different moments in each
// second): each second runs the job on one of them, the other skips it.
func ExampleNew() {
	urls, stop, err := embedded.StartN(3) // in production: independent redis-server masters
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	var mu sync.Mutex
	outcomes := map[time.Time][]string{} // tick → outcome on each replica
	both := make(chan []string, 1)
	observe := func(e scheduler.Event) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[e.Tick] = append(outcomes[e.Tick], string(e.Outcome))
		if len(outcomes[e.Tick]) == 2 {
			select {
			case both <- outcomes[e.Tick]:
			default:
			}
		}
	}

	for range 2 { // in production: one per process
		locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: embedded nodes share a busy CPU
		if err != nil {
			log.Fatal(err)
		}
		defer locks.Close()
		locker, err := gocronlock.New(locks,
			map[string]string{"sync": "@every 1s"}, // the job's gocron name and schedule: gocron.DurationJob(time.Second)
			scheduler.WithObserver(observe),
			scheduler.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			log.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			log.Fatal(err)
		}
		defer s.Shutdown()
		_, err = s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() { /* the work */ }), gocron.WithName("sync"))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
		time.Sleep(300 * time.Millisecond)
	}

	got := <-both
	slices.Sort(got)
	fmt.Println(got)
	// Output: [ran skipped_other_replica]
}
