package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"
)

// Scheduler runs named jobs on cron schedules (a robfig/cron Cron), each
// tick at most once across the replicas that register the same jobs with
// locks from the same Redlock nodes. Its methods are safe for concurrent use.
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

type registered struct {
	id   cron.EntryID
	spec string
	r    *runner
}

// New returns a Scheduler taking its locks from client. The options are
// defaults for every job (Register may override them; WithSpec is refused).
func New(client *redlock.Client, opts ...Option) (*Scheduler, error) {
	locks, err := lockerFor(client)
	if err != nil {
		return nil, err
	}
	return newScheduler(locks, opts)
}

func newScheduler(locks locker, opts []Option) (*Scheduler, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts, "a Scheduler"); err != nil {
		return nil, err
	}
	stopping, stopBegin := context.WithCancel(context.Background())
	running, kill := context.WithCancelCause(context.Background())
	return &Scheduler{
		locks: locks, cfg: cfg, clock: newClockWatch(locks, cfg),
		cron:      cron.New(cron.WithLocation(cfg.loc), cron.WithParser(specParser), cron.WithLogger(cron.DiscardLogger)),
		host:      &host{stopping: stopping, running: running, wg: &sync.WaitGroup{}},
		stopBegin: stopBegin, kill: kill, jobs: map[string]registered{},
	}, nil
}

// Register adds fn, run as Func runs it on each tick of spec: 6 fields with
// seconds first, 5 with minutes first, or a descriptor (@hourly; @every 30s
// aligned as Every says), with an optional CRON_TZ=Zone prefix. It fails
// with redlock.ErrInvalid, before or after Start or Stop.
func (s *Scheduler) Register(name, spec string, fn func(ctx context.Context) error, opts ...Option) error {
	return s.add(name, spec, funcJob(fn), opts)
}

// RegisterTask adds the asynq bridge of EnqueueJob: task enqueued with enq
// (an *asynq.Client) once per tick of spec across replicas.
func (s *Scheduler) RegisterTask(name, spec string, enq enqueuer, task *asynq.Task, opts ...Option) error {
	return s.add(name, spec, &taskJob{enq: enq, task: task}, opts)
}

func (s *Scheduler) add(name, spec string, job cron.Job, opts []Option) error {
	cfg := s.cfg
	if err := cfg.apply(opts, "a Scheduler"); err != nil {
		return fmt.Errorf("%w (job %q)", err, name)
	}
	sched, err := parse(spec, cfg.loc, false)
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

// Start runs the jobs in the background, measures the clock offset, and
// catches up the jobs with WithCatchUp. It does nothing once started or
// stopped: a stopped Scheduler cannot be restarted.
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

// Stop stops starting ticks and waits for the running jobs (runs that have
// not started their job give up at once). When ctx ends first, the jobs'
// contexts are cancelled with cause "scheduler: stopped" and Stop returns
// ctx's error. It may be called more than once; a nil ctx is refused.
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

// Entry is what a Scheduler knows of one of its jobs.
type Entry struct {
	Job     string    // the job's name
	Spec    string    // the spec it was registered with
	Next    time.Time // the next activation; zero before Start
	Prev    time.Time // the last activation its cron fired; zero if none yet
	Last    Event     // the last outcome reported here (zero Outcome if none yet)
	LastRun time.Time // the tick this replica last ran (or enqueued); zero if none
	// RanBy names the replica that ran Last.Tick: this one, or the holder
	// another replica's lock record names (if the client records holders).
	RanBy string
}

// entryState is the part of an Entry a runner keeps.
type entryState struct {
	last       Event
	lastRun    time.Time
	otherRanBy string // the holder of the last tick another replica ran
}

// Entries returns the registered jobs with their next and last runs,
// sorted by name.
func (s *Scheduler) Entries() []Entry {
	s.mu.Lock()
	jobs := maps.Clone(s.jobs)
	s.mu.Unlock()
	out := make([]Entry, 0, len(jobs))
	for name, j := range jobs {
		ce := s.cron.Entry(j.id) // zero Next and Prev before Start
		j.r.mu.Lock()
		st := j.r.state
		j.r.mu.Unlock()
		e := Entry{Job: name, Spec: j.spec, Next: ce.Next, Prev: ce.Prev, Last: st.last, LastRun: st.lastRun}
		switch {
		case !e.LastRun.IsZero() && e.LastRun.Equal(e.Last.Tick):
			e.RanBy = j.r.cfg.replica
		case e.Last.Outcome == OutcomeSkippedOtherReplica || e.Last.Outcome == OutcomeSkippedBeyondSkew:
			e.RanBy = st.otherRanBy
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Job, b.Job) })
	return out
}
