package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// lockNodes starts three redis-servers for the example; in production
// these are independent redis-server masters too.
func lockNodes() (*redlock.Client, func()) {
	urls, stop, err := redistest.Servers(3)
	if err != nil {
		log.Fatal(err)
	}
	locks, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(time.Second)) // patient: examples run as tests on busy machines
	if err != nil {
		log.Fatal(err)
	}
	return locks, func() {
		locks.Close()
		stop()
	}
}

// Decorate every handler of a mux so that tasks for the same SKU never run
// at the same time, and wire the server so that conflicts neither count as
// failures nor consume retries.
func ExampleLock() {
	locks, stop := lockNodes()
	defer stop()

	mux := asynq.NewServeMux()
	mux.Use(middleware.Lock(locks, middleware.ByField("sku"),
		middleware.WithTTL(30*time.Second),
		middleware.Wait(2*time.Second),
		middleware.WithRollback(func(ctx context.Context, t *asynq.Task, cause error) error {
			return nil // undo partial work here; runs while the lock is held
		}),
	))
	mux.HandleFunc("stock:adjust", func(ctx context.Context, t *asynq.Task) error {
		li, _ := middleware.LockFromContext(ctx)
		fmt.Println("adjusting under", li.Resource)
		return nil
	})
	_ = asynq.Config{ // for asynq.NewServer(redisOpt, cfg)
		IsFailure:      middleware.IsFailure,
		RetryDelayFunc: middleware.RetryDelay,
	}

	// What an asynq server does with a task:
	task := asynq.NewTask("stock:adjust", []byte(`{"sku":"A-100","delta":-3}`))
	if err := mux.ProcessTask(context.Background(), task); err != nil {
		log.Fatal(err)
	}
	// Output: adjusting under task:stock:adjust:A-100
}

// A task whose key cannot be derived is archived with a clear reason instead
// of being retried forever.
func ExampleByField() {
	locks, stop := lockNodes()
	defer stop()
	h := middleware.Lock(locks, middleware.ByField("order.sku"))(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	err := h.ProcessTask(context.Background(), asynq.NewTask("stock:adjust", []byte(`{"order":{}}`)))
	fmt.Println(err)
	// Output: task stock:adjust (id ): middleware: cannot derive the task's lock key: field "order.sku" is missing from the payload: skip retry for the task
}

// Give the middleware the asynq broker the server dequeues from: a busy
// task is then parked rather than requeued on a timer (on its last retry,
// in asynq's archive, and brought back from there), and tasks a stopped
// process left parked are moved back by the others. The server needs the
// package's IsFailure and RetryDelay.
func ExampleWithBroker() {
	locks, stop := lockNodes()
	defer stop()
	redisOpt := asynq.RedisClientOpt{Addr: "localhost:6379"} // the asynq broker
	broker := redis.NewClient(&redis.Options{Addr: redisOpt.Addr})
	defer broker.Close()

	mux := asynq.NewServeMux()
	mux.Use(middleware.Lock(locks, middleware.ByField("sku"), middleware.WithBroker(broker)))
	_ = asynq.NewServer(redisOpt, asynq.Config{
		IsFailure:      middleware.IsFailure,  // a parked task is not a failure...
		RetryDelayFunc: middleware.RetryDelay, // ...and stays parked until promoted or its backstop
	})
	fmt.Println("parking on", redisOpt.Addr)
	// Output: parking on localhost:6379
}

// Undo a task's partial work when its handler fails: the hook runs while the
// lock is still held, so no other task of the SKU sees the half-done state,
// and its context carries the lock.
func ExampleWithRollback() {
	locks, stop := lockNodes()
	defer stop()
	reserved := map[string]int{}
	undo := func(ctx context.Context, t *asynq.Task, cause error) error {
		li, _ := middleware.LockFromContext(ctx)
		reserved["A-100"] = 0
		fmt.Printf("rolled back under %s after: %v\n", li.Resource, cause)
		return nil
	}
	h := middleware.Lock(locks, middleware.ByField("sku"), middleware.WithRollback(undo))(
		asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			reserved["A-100"] += 3                           // the first step is done...
			return errors.New("payment service unavailable") // ...the second failed
		}))

	err := h.ProcessTask(context.Background(), asynq.NewTask("order:place", []byte(`{"sku":"A-100"}`)))
	fmt.Println("task error:", err)
	fmt.Println("reserved:", reserved["A-100"])
	// Output:
	// rolled back under task:order:place:A-100 after: payment service unavailable
	// task error: payment service unavailable
	// reserved: 0
}

// Give asynq as many workers as the room has places: tasks that wait for a
// busy lock wait in the room's 16 wait places, while at most 8 tasks try for
// their locks or run at once. Handlers without a lock take run places too:
// their middleware's key is empty.
func ExampleWithRoom() {
	locks, stop := lockNodes()
	defer stop()
	const running, waiting = 8, 16
	room := middleware.WithRoom(running, waiting)
	stock := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		li, _ := middleware.LockFromContext(ctx)
		fmt.Println("adjusting under", li.Resource)
		return nil
	})
	noLock := func(context.Context, *asynq.Task) (string, error) { return "", nil }
	mux := asynq.NewServeMux()
	mux.Handle("stock:adjust", middleware.Lock(locks, middleware.ByField("sku"), room)(stock))
	mux.Handle("report:daily", middleware.Lock(locks, noLock, room)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		fmt.Println("report, unlocked")
		return nil
	})))
	_ = asynq.Config{Concurrency: running + waiting} // for asynq.NewServer(redisOpt, cfg)

	for _, task := range []*asynq.Task{
		asynq.NewTask("stock:adjust", []byte(`{"sku":"A-100","delta":-3}`)),
		asynq.NewTask("report:daily", nil),
	} {
		if err := mux.ProcessTask(context.Background(), task); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// adjusting under task:stock:adjust:A-100
	// report, unlocked
}
