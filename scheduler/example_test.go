package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// nodes starts n redis-servers for the examples; in production these
// are independent redis-server masters too.
func nodes(n int) (urls []string, stop func()) {
	urls, stop, err := redistest.Servers(n)
	if err != nil {
		log.Fatal(err)
	}
	return urls, stop
}

var quiet = scheduler.WithLogger(slog.New(slog.DiscardHandler))

// Two replicas run the same cron table, each with its own cron and its own
// lock client, wrapping the job as any robfig JobWrapper: each tick runs on
// one of them, the other skips it.
func ExampleSingleton() {
	urls, stop := nodes(3)
	defer stop()

	var mu sync.Mutex
	outcomes := map[time.Time][]string{} // tick → outcome on each replica
	both := make(chan []string, 1)
	observe := func(e scheduler.Event) {
		if e.Outcome == scheduler.OutcomeClock {
			return // a clock measurement, not a run
		}
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

	var crons []*cron.Cron
	for range 2 { // in production: one per process
		locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
		if err != nil {
			log.Fatal(err)
		}
		defer locks.Close()
		c := cron.New(cron.WithSeconds())
		job := cron.NewChain(scheduler.Singleton(locks, "report",
			scheduler.WithObserver(observe), quiet,
		)).Then(scheduler.Func(func(ctx context.Context) error {
			return nil // send the report; ctx is cancelled if the lock is lost
		}))
		if _, err := c.AddJob("* * * * * *", job); err != nil {
			log.Fatal(err)
		}
		c.Start()
		crons = append(crons, c)
	}

	tick := <-both
	for _, c := range crons {
		<-c.Stop().Done()
	}
	slices.Sort(tick)
	fmt.Println(tick)
	// Output: [ran skipped_other_replica]
}

// One Singleton for every job of a cron (cron.WithChain): each job gets its
// own name, by the order the jobs are added, and its own ticks.
func ExampleSingleton_withChain() {
	urls, stop := nodes(3)
	defer stop()
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	var mu sync.Mutex
	seen := map[string]bool{}
	all := make(chan []string, 1)
	observe := func(e scheduler.Event) {
		if e.Outcome == scheduler.OutcomeClock {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen[e.Job] = true
		if len(seen) == 2 {
			names := slices.Sorted(maps.Keys(seen))
			select {
			case all <- names:
			default:
			}
		}
	}
	c := cron.New(cron.WithSeconds(), cron.WithChain(scheduler.Singleton(locks, "svc", scheduler.WithObserver(observe), quiet)))
	job := scheduler.Func(func(ctx context.Context) error { return nil })
	for _, spec := range []string{"* * * * * *", "*/2 * * * * *"} {
		if _, err := c.AddJob(spec, job); err != nil {
			log.Fatal(err)
		}
	}
	c.Start()
	names := <-all
	<-c.Stop().Done()
	fmt.Println(names)
	// Output: [svc svc#2]
}

// A Scheduler runs named func(ctx) error jobs; every replica registers the
// same jobs and each tick runs once in the fleet.
func ExampleScheduler() {
	urls, stop := nodes(3)
	defer stop()
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	s, err := scheduler.New(locks, quiet) // specs in UTC, default skew 1s
	if err != nil {
		log.Fatal(err)
	}
	ticks := make(chan time.Time, 10)
	err = s.Register("cleanup", "* * * * * *", func(ctx context.Context) error {
		run, _ := scheduler.FromContext(ctx)
		ticks <- run.Tick
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	tick := <-ticks

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil { // waits for running jobs
		log.Fatal(err)
	}
	fmt.Println("cleanup ran for a whole-second tick:", tick.Nanosecond() == 0)
	// Output: cleanup ran for a whole-second tick: true
}

// printer stands for an *asynq.Client.
type printer struct{ once sync.Once }

func (p *printer) EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	p.once.Do(func() {
		for _, o := range opts {
			if o.Type() == asynq.TaskIDOpt {
				fmt.Println("enqueue", t.Type(), "as", strings.HasPrefix(o.Value().(string), "cron:report:"))
			}
		}
	})
	return &asynq.TaskInfo{}, nil
}

// RegisterTask bridges cron to asynq: each tick's task is enqueued once
// across replicas, with a task ID made of the job name and the tick.
func ExampleScheduler_RegisterTask() {
	urls, stop := nodes(3)
	defer stop()
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	s, err := scheduler.New(locks, scheduler.WithSkew(300*time.Millisecond), quiet)
	if err != nil {
		log.Fatal(err)
	}
	enqueued := make(chan struct{}, 10)
	err = s.RegisterTask("report", "* * * * * *", &printer{}, asynq.NewTask("report:generate", nil), scheduler.WithObserver(func(e scheduler.Event) {
		if e.Outcome == scheduler.OutcomeRan {
			enqueued <- struct{}{}
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-enqueued
	if err := s.Stop(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Output: enqueue report:generate as true
}

// Singleton refuses, where the wrapper is made, a configuration that could
// never run as meant: it panics with an error matching redlock.ErrInvalid.
func ExampleSingleton_refused() {
	urls, stop := nodes(3)
	defer stop()
	locks, err := redlock.NewFromURLs(urls)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	defer func() {
		err, _ := recover().(error)
		fmt.Println(errors.Is(err, redlock.ErrInvalid))
	}()
	scheduler.Singleton(locks, "report", scheduler.WithSpec("@every 10s"))
	// Output: true
}

// Every replaces robfig's "@every", whose ticks count from each cron's
// start, with ticks that every replica shares: the multiples of the
// interval since the Unix epoch. Use it with c.Schedule:
//
//	c.Schedule(scheduler.Every(10*time.Second), cron.NewChain(scheduler.Singleton(locks, "poll")).Then(job))
func ExampleEvery() {
	every := scheduler.Every(10 * time.Second)
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fmt.Println(every.Next(t).Format(time.TimeOnly))
	fmt.Println(every.Next(every.Next(t)).Format(time.TimeOnly))
	// Output:
	// 03:04:10
	// 03:04:20
}

// EnqueueJob bridges a robfig cron to asynq under Singleton: each tick's
// task is enqueued once across replicas, with a task ID made of the job
// name and the tick, which FromContext and the Event also carry.
func ExampleEnqueueJob() {
	urls, stop := nodes(3)
	defer stop()
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ids := make(chan string, 10)
	c := cron.New(cron.WithSeconds())
	job := cron.NewChain(scheduler.Singleton(locks, "report", quiet,
		scheduler.WithObserver(func(e scheduler.Event) {
			if e.Outcome == scheduler.OutcomeRan {
				ids <- e.TaskID
			}
		}),
	)).Then(scheduler.EnqueueJob(&printer{}, asynq.NewTask("report:generate", nil))) // an *asynq.Client in production
	if _, err := c.AddJob("* * * * * *", job); err != nil {
		log.Fatal(err)
	}
	c.Start()
	id := <-ids
	<-c.Stop().Done()
	fmt.Println("event task ID:", strings.HasPrefix(id, "cron:report:"))
	// Output:
	// enqueue report:generate as true
	// event task ID: true
}
