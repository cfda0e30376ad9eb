package scheduler

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// Scheduler runs named jobs on cron schedules, each tick at most once across
// the replicas that register the same jobs with locks from the same Redlock
// nodes. It wraps a robfig/cron Cron with seconds-level specs. Its methods
// are safe for concurrent use.
type Scheduler struct {
	locks locker
	cfg   config // defaults for every job
	cron  *cron.Cron
	host  *host
	clock *clockWatch

	stopBegin context.CancelFunc
	kill      context.CancelCauseFunc

	mu      sync.Mutex
	jobs    map[string]registered
	started bool
	stopped bool
}

// registered is a job of a Scheduler.
type registered struct {
	id   cron.EntryID
	spec string
	r    *runner
}

// New returns a Scheduler taking its locks from client. The options are
// defaults for every job (Register may override them; WithSpec is refused).
// It measures this replica's clock offset to the lock nodes when it starts
// and then at most once a minute.
func New(client *redlock.Client, opts ...Option) (*Scheduler, error) {
	locks, err := lockerFor(client)
	if err != nil {
		return nil, err
	}
	return newScheduler(locks, opts)
}

func newScheduler(locks locker, opts []Option) (*Scheduler, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if cfg.schedule != nil || cfg.hasSpec {
		return nil, invalidf("WithSpec is for Singleton; a Scheduler job's spec is given to Register")
	}
	stopping, stopBegin := context.WithCancel(context.Background())
	running, kill := context.WithCancelCause(context.Background())
	return &Scheduler{
		locks:     locks,
		cfg:       cfg,
		clock:     newClockWatch(locks, cfg),
		cron:      cron.New(cron.WithLocation(cfg.loc), cron.WithParser(specParser), cron.WithLogger(cron.DiscardLogger)),
		host:      &host{stopping: stopping, running: running, wg: &sync.WaitGroup{}},
		stopBegin: stopBegin,
		kill:      kill,
		jobs:      map[string]registered{},
	}, nil
}

// Register adds a job that calls fn on each tick of spec: 6 fields with
// seconds first, 5 with minutes first, or a descriptor (@hourly; @every 30s
// aligned as Every says), with an optional CRON_TZ=Zone prefix. fn's context
// is cancelled with cause redlock.ErrLockLost if the lock is lost, or
// "scheduler: stopped" when Stop's context ends; a panic is recovered and
// reported. It fails with ErrInvalid, before or after Start or Stop.
func (s *Scheduler) Register(name, spec string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("job %q: nil function", name)
	}
	return s.add(name, spec, funcJob(fn), opts)
}

// RegisterTask adds a job that enqueues task with enq on each tick of spec,
// exactly once across replicas, as EnqueueJob does. It fails as Register.
func (s *Scheduler) RegisterTask(name, spec string, enq enqueuer, task *asynq.Task, opts ...Option) error {
	return s.add(name, spec, &taskJob{enq: enq, task: task}, opts)
}

func (s *Scheduler) add(name, spec string, job cron.Job, opts []Option) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	cfg := s.cfg
	if err := cfg.apply(opts); err != nil {
		return fmt.Errorf("%w (job %q)", err, name)
	}
	if cfg.schedule != nil || cfg.hasSpec {
		return invalidf("job %q: WithSpec is for Singleton; pass the spec to Register", name)
	}
	sched, err := parse(spec, cfg.loc)
	if err != nil {
		return fmt.Errorf("%w (job %q)", err, name)
	}
	r, err := newRunner(s.locks, name, sched, job, cfg, s.host)
	if err != nil {
		return err
	}
	r.clock = s.clock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return invalidf("job %q: cannot register after Stop", name)
	}
	if _, dup := s.jobs[name]; dup {
		return invalidf("job %q: a job of that name is already registered", name)
	}
	s.jobs[name] = registered{id: s.cron.Schedule(sched, r), spec: spec, r: r}
	if s.started {
		r.catchUpLater()
	}
	return nil
}

// Start starts running the jobs in the background, measures this
// replica's clock offset, and runs the missed tick of each job with
// WithCatchUp if no replica ran it. It does nothing if the Scheduler is
// already started or stopped: a stopped Scheduler cannot be restarted.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	s.clock.poke()
	for _, j := range s.jobs {
		j.r.catchUpLater()
	}
	s.cron.Start()
}

// Stop stops starting ticks and waits for the running jobs; runs that have
// not started their job give up at once. When ctx ends first, the jobs'
// contexts are cancelled with cause "scheduler: stopped" and Stop returns
// ctx's error.
// Tick records stay until they expire. Stop may be called more than once; a
// nil ctx is refused with ErrInvalid (the Scheduler keeps running).
func (s *Scheduler) Stop(ctx context.Context) error {
	if ctx == nil {
		return invalidf("nil context given to Stop: the scheduler still runs; stop it with a context that bounds the wait")
	}
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.stopBegin()
	cronDone := s.cron.Stop() // waits for nothing if the cron never started
	done := make(chan struct{})
	go func() {
		<-cronDone.Done()
		s.host.wg.Wait() // catch-up runs
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.kill(errStopped)
		return ctx.Err()
	}
}
