package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/internal/checker"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/redis/go-redis/v9"
)

// The worker side of the multi-process proofs: when proofWorkerEnv is set,
// TestMain runs proofWorkerMain instead of the tests. The parent (see
// proof_runner_test.go) talks to a worker through
//
//   - its environment: the workerConfig, as JSON;
//   - its stdin: one word a line, "go" to start (and, in hold mode, once more
//     to go on after the pause); end of file means the parent is gone and
//     the worker exits at once;
//   - its stdout: one workerEvent a line, as JSON;
//   - the file cfg.Out: the workerOutput, written before a clean exit.
//
// Exit status 0 means the worker did what it was asked; anything else is a
// failure of the run (not a finding of the checker), explained on stderr.

// proofWorkerEnv names the environment variable holding a worker's config.
const proofWorkerEnv = "ASYNQLOCK_PROOF_WORKER"

// Worker modes.
const (
	// modeContend: goroutines lock random resources and do a two-step
	// read-modify-write of each resource's register inside the lock, until
	// Duration has passed or MaxOps sections were done.
	modeContend = "contend"
	// modeHold: lock Resources[0] with a fence and keep-alive, write the
	// register through the fenced store, announce "holding", wait for the
	// second "go" (the parent pauses the worker meanwhile), write again with
	// the same fence without looking at the lock, and report the outcome and
	// the keep-alive's cause.
	modeHold = "hold"
	// modeWrite: lock Resources[0] with a fence, update the register through
	// the fenced store, release, announce "wrote".
	modeWrite = "write"
)

// workerConfig is what a worker is told to do.
type workerConfig struct {
	ID          string           `json:"id"`
	Mode        string           `json:"mode"`
	Nodes       []string         `json:"nodes"`     // lock node URLs
	Store       string           `json:"store"`     // address of the register store
	KeyPrefix   string           `json:"keyPrefix"` // of the registers on the store
	Resources   []string         `json:"resources"`
	Goroutines  int              `json:"goroutines"`
	Hold        [2]time.Duration `json:"hold"`           // range of the pause between read and write
	Slow        string           `json:"slow,omitempty"` // worked on by one more goroutine, with SlowHold
	SlowHold    [2]time.Duration `json:"slowHold"`
	TTL         time.Duration    `json:"ttl"`
	NodeTimeout time.Duration    `json:"nodeTimeout"`
	KeepAlive   bool             `json:"keepAlive"`
	Fencing     bool             `json:"fencing"`
	Duration    time.Duration    `json:"duration"` // from "go" to the last acquisition
	// With Phase set, the run alternates calm and busy phases of that
	// length, calm first: in a calm phase each goroutine pauses a time in
	// Think after every section, so most locks meet a free resource.
	Phase  time.Duration    `json:"phase,omitempty"`
	Think  [2]time.Duration `json:"think"`
	MaxOps int              `json:"maxOps"`
	Limit  time.Duration    `json:"limit"` // hard bound on the worker's life
	Out    string           `json:"out"`
	// Of the once workers (once_proc_test.go).
	Queue   string `json:"queue,omitempty"`
	Records bool   `json:"records,omitempty"`
	HoldAck bool   `json:"holdAck,omitempty"`
}

// workerEvent is one line of a worker's stdout.
type workerEvent struct {
	Event string `json:"event"` // ready, holding, stale, keepalive, wrote
	At    int64  `json:"at"`    // on the proof's clock
	Fence int64  `json:"fence,omitempty"`
	Until int64  `json:"until,omitempty"` // end of the lock's validity
	OK    bool   `json:"ok,omitempty"`
	Value string `json:"value,omitempty"`
	Err   string `json:"err,omitempty"`
}

// workerStats counts what happened to a worker's locks.
type workerStats struct {
	AcquireErrors    int    `json:"acquireErrors"` // acquisitions that failed before the end of the run
	ReleaseErrors    int    `json:"releaseErrors"`
	LostLocks        int    `json:"lostLocks"` // sections whose keep-alive reported a loss
	Extensions       int    `json:"extensions"`
	FailedExtensions int    `json:"failedExtensions"`
	NodeErrors       int    `json:"nodeErrors"`
	FirstRound       int    `json:"firstRound"`           // acquisitions decided by their first round (or handed over)
	Retried          int    `json:"retried"`              // acquisitions that needed more rounds: the waiter queue engaged
	FirstError       string `json:"firstError,omitempty"` // a sample, for notes
}

// workerOutput is what a worker leaves in cfg.Out.
type workerOutput struct {
	ID       string            `json:"id"`
	Sections []checker.Section `json:"sections"`
	Stats    workerStats       `json:"stats"`
}

// proofWorker is the state of a worker process.
type proofWorker struct {
	cfg   workerConfig
	locks *redlock.Client
	store *redis.Client
	cmds  chan string // lines read from stdin
	outMu sync.Mutex  // orders stdout lines

	mu       sync.Mutex
	sections []checker.Section
	stats    workerStats

	extensions, failedExtensions, nodeErrors atomic.Int64
	firstRound, retried                      atomic.Int64
}

// proofWorkerMain runs a worker from its JSON config and returns the exit
// status.
func proofWorkerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "proof worker: bad config: %v\n", err)
		return 2
	}
	if cfg.Limit > 0 {
		time.AfterFunc(cfg.Limit, func() {
			fmt.Fprintf(os.Stderr, "proof worker %s: still running after %v: giving up\n", cfg.ID, cfg.Limit)
			os.Exit(3)
		})
	}
	w := &proofWorker{cfg: cfg, cmds: make(chan string, 4)}
	go w.readStdin()
	if err := w.run(); err != nil {
		fmt.Fprintf(os.Stderr, "proof worker %s: %v\n", cfg.ID, err)
		return 1
	}
	return 0
}

func (w *proofWorker) run() error {
	obs := func(e redlock.Event) {
		switch {
		case e.Kind == redlock.EventExtend && e.Err == nil:
			w.extensions.Add(1)
		case e.Kind == redlock.EventExtend:
			w.failedExtensions.Add(1)
		case e.Kind == redlock.EventNodeError:
			w.nodeErrors.Add(1)
		case e.Kind == redlock.EventAcquire && e.Err == nil && e.Attempts == 1:
			w.firstRound.Add(1)
		case e.Kind == redlock.EventAcquire && e.Err == nil:
			w.retried.Add(1)
		}
	}
	locks, err := redlock.NewFromURLs(w.cfg.Nodes, redlock.WithNodeTimeout(w.cfg.NodeTimeout), redlock.WithObserver(obs))
	if err != nil {
		return err
	}
	defer locks.Close()
	w.locks = locks
	o := redistest.ClientOptions(w.cfg.Store)
	o.ReadTimeout, o.WriteTimeout, o.DialTimeout = 3*time.Second, 3*time.Second, time.Second
	w.store = redis.NewClient(o)
	defer w.store.Close()
	if err := w.store.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}

	w.emit(workerEvent{Event: "ready"})
	w.await("go")
	ctx := context.Background()
	switch w.cfg.Mode {
	case modeContend:
		err = w.contend(ctx)
	case modeHold:
		err = w.hold(ctx)
	case modeWrite:
		err = w.write(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", w.cfg.Mode)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Extensions = int(w.extensions.Load())
	w.stats.FailedExtensions = int(w.failedExtensions.Load())
	w.stats.NodeErrors = int(w.nodeErrors.Load())
	w.stats.FirstRound, w.stats.Retried = int(w.firstRound.Load()), int(w.retried.Load())
	b, err := json.Marshal(workerOutput{ID: w.cfg.ID, Sections: w.sections, Stats: w.stats})
	if err != nil {
		return err
	}
	return os.WriteFile(w.cfg.Out, b, 0o644)
}

// readStdin forwards stdin's lines to w.cmds; at its end the parent is gone
// (or gave up on the worker), and so does the worker.
func (w *proofWorker) readStdin() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		w.cmds <- sc.Text()
	}
	os.Exit(4)
}

// await waits for the parent to send word.
func (w *proofWorker) await(word string) {
	for c := range w.cmds {
		if c == word {
			return
		}
	}
}

func (w *proofWorker) emit(e workerEvent) {
	if e.At == 0 {
		e.At = stamp()
	}
	b, _ := json.Marshal(e)
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(os.Stdout, "%s\n", b)
}

func (w *proofWorker) record(s checker.Section) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sections = append(w.sections, s)
}

func (w *proofWorker) count(f func(*workerStats), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.stats)
	if err != nil && w.stats.FirstError == "" {
		w.stats.FirstError = err.Error()
	}
}

func (w *proofWorker) register(resource string) string { return w.cfg.KeyPrefix + resource }

func (w *proofWorker) lockOpts() []redlock.LockOption {
	if w.cfg.Fencing {
		return []redlock.LockOption{redlock.WithFencing()}
	}
	return nil
}

// contend runs the goroutines of modeContend.
func (w *proofWorker) contend(ctx context.Context) error {
	stopAt := stamp() + int64(w.cfg.Duration)
	var ops atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, w.cfg.Goroutines+1)
	loop := func(g int, resources []string, hold [2]time.Duration) {
		h := fnv.New64a()
		h.Write([]byte(w.cfg.ID))
		rng := rand.New(rand.NewPCG(h.Sum64(), uint64(g)))
		for seq := 0; stamp() < stopAt && ops.Add(1) <= int64(w.cfg.MaxOps); seq++ {
			res := resources[rng.IntN(len(resources))]
			actx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Duration(stopAt-stamp())))
			l, err := w.locks.Acquire(actx, res, w.cfg.TTL, w.lockOpts()...)
			cancel()
			if err != nil {
				if stamp() < stopAt {
					w.count(func(s *workerStats) { s.AcquireErrors++ }, err)
				}
				continue
			}
			d := hold[0] + time.Duration(rng.Int64N(int64(hold[1]-hold[0])+1))
			value := w.cfg.ID + "/" + strconv.Itoa(g) + "/" + strconv.Itoa(seq)
			if err := w.section(ctx, l, fmt.Sprintf("%s/%d", w.cfg.ID, g), d, value); err != nil {
				errs[g] = err
				return
			}
			w.think(rng, stopAt)
		}
	}
	for g := range w.cfg.Goroutines {
		wg.Go(func() { loop(g, w.cfg.Resources, w.cfg.Hold) })
	}
	if w.cfg.Slow != "" {
		wg.Go(func() { loop(w.cfg.Goroutines, []string{w.cfg.Slow}, w.cfg.SlowHold) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// think pauses a goroutine after a section while the run is in a calm
// phase (see workerConfig.Phase).
func (w *proofWorker) think(rng *rand.Rand, stopAt int64) {
	if w.cfg.Phase <= 0 {
		return
	}
	elapsed := time.Duration(stamp() - (stopAt - int64(w.cfg.Duration)))
	if (elapsed/w.cfg.Phase)%2 == 0 {
		th := w.cfg.Think
		time.Sleep(th[0] + time.Duration(rng.Int64N(int64(th[1]-th[0])+1)))
	}
}

// section is one critical section under l: read the register, wait d, write
// value, release. With keep-alive, a section whose lock is lost stops and
// writes nothing. An error means the store failed: the history would be
// ambiguous, so the run fails.
func (w *proofWorker) section(ctx context.Context, l *redlock.Lock, holder string, d time.Duration, value string) error {
	s := checker.Section{Resource: l.Resource(), Holder: holder, Fence: l.Fence(), Start: stamp()}
	work, stop := ctx, context.CancelFunc(func() {})
	if w.cfg.KeepAlive {
		work, stop = l.KeepAlive(ctx)
	}
	defer stop()
	key := w.register(l.Resource())
	read, err := w.store.Get(ctx, key).Result()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("store GET %s: %w", key, err)
	}
	s.Read = read
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-work.Done():
		t.Stop()
	}
	if work.Err() != nil {
		s.Note = "lock lost: " + context.Cause(work).Error()
		w.count(func(st *workerStats) { st.LostLocks++ }, nil)
	} else {
		if err := w.store.Set(ctx, key, value, 0).Err(); err != nil {
			return fmt.Errorf("store SET %s: %w", key, err)
		}
		s.Wrote = value
	}
	s.End = stamp()
	stop()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		s.Note = joinNote(s.Note, "release: "+err.Error())
		w.count(func(st *workerStats) { st.ReleaseErrors++ }, err)
	}
	w.record(s)
	return nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
