package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// env is one redis-server lock node, two independent lock clients (ours and a
// competitor's) and a raw client to the node.
type env struct {
	locks, other *redlock.Client
	raw          *redis.Client
	srv          *redistest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	// A node timeout twice the default: the node answers a
	// loaded machine under -race slower than 50ms; the TTLs used here
	// (200ms and up) leave room for it.
	return newEnvWith(t, redlock.WithRetryDelay(5*time.Millisecond, 10*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond))
}

// patientNodeTimeout is the node timeout of patient clients: a loaded
// machine under -race (load ~15 on 2 cores) was seen to miss 100ms, and a
// round that misses it fails with ErrQuorum, which a test that is not about
// node timeouts must never see. A TTL must exceed it (plus the drift
// allowance): 1.2s and up.
const patientNodeTimeout = time.Second

// patient returns the options of a patient lock client, then opts: node
// timeout patientNodeTimeout, and the library's default retry delays
// (25ms-100ms) rather than newEnv's 5ms-10ms, with which a waiter sends the
// node a script every few milliseconds besides awaiting the release
// notification, and a starved process answers all of them late.
func patient(opts ...redlock.Option) []redlock.Option {
	return append([]redlock.Option{redlock.WithNodeTimeout(patientNodeTimeout),
		redlock.WithRetryDelay(25*time.Millisecond, 100*time.Millisecond)}, opts...)
}

// patientEnv is newEnv with patient lock clients, for tests that are not
// about timing.
func patientEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, patient()...)
}

// newEnvWith is newEnv with lock clients made with opts.
func newEnvWith(t *testing.T, opts ...redlock.Option) *env {
	t.Helper()
	srv := redistest.StartServer(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	e := &env{raw: raw, srv: srv}
	e.locks, e.other = e.client(t, opts...), e.client(t, opts...)
	return e
}

// client returns a new lock client of the env's node made with opts,
// closed at the end of the test.
func (e *env) client(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs([]string{e.srv.URL()}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// busyEnv is newEnv with the task metadata m and res held by the other
// client (released at the end of the test if still held).
func busyEnv(t *testing.T, m taskMeta) (*env, *redlock.Lock) {
	t.Helper()
	return holdRes(t, newEnv(t), m)
}

// patientBusyEnv is busyEnv on a patientEnv.
func patientBusyEnv(t *testing.T, m taskMeta) (*env, *redlock.Lock) {
	t.Helper()
	return holdRes(t, patientEnv(t), m)
}

// holdRes gives handlers the task metadata m and has e's other client hold
// res (released at the end of the test if still held).
func holdRes(t *testing.T, e *env, m taskMeta) (*env, *redlock.Lock) {
	t.Helper()
	withMeta(t, m)
	held, err := e.other.TryAcquire(context.Background(), res, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	return e, held
}

// lockMW is Lock(client, key, opts...)(next) with the middleware itself
// returned too, for tests that watch its state (m.waiting).
func lockMW(t *testing.T, client *redlock.Client, key KeyFunc, next asynq.Handler, opts ...Option) (*mw, asynq.Handler) {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m := newMW(client, key, cfg)
	return m, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error { return m.process(ctx, task, next) })
}

// withMeta makes handlers see asynq metadata as if run by a server.
func withMeta(t *testing.T, m taskMeta) {
	t.Helper()
	old := metaOf
	metaOf = func(context.Context) taskMeta { return m }
	t.Cleanup(func() { metaOf = old })
}

// holder returns who holds res on the single node ("" when free). A node
// that did not answer within the node timeout (a loaded machine) is asked
// again, for at most 10s: its silence is no free resource.
func (e *env) holder(t *testing.T, res string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := e.locks.Inspect(context.Background(), res)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].Err == nil {
			return st[0].Token
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not answer for 10s: %v", st[0].Err)
		}
	}
}

// heldAfter returns who still holds res once the middleware's release,
// which the task does not wait for, had ample time to run ("" when free).
func (e *env) heldAfter(t *testing.T, res string) string {
	t.Helper()
	got := e.holder(t, res)
	for deadline := time.Now().Add(10 * time.Second); got != "" && time.Now().Before(deadline); got = e.holder(t, res) {
		time.Sleep(time.Millisecond)
	}
	return got
}

// recorder is a fake handler that records its runs.
type recorder struct {
	mu    sync.Mutex
	runs  int
	infos []LockInfo
	fn    func(ctx context.Context) error
}

func (r *recorder) ProcessTask(ctx context.Context, _ *asynq.Task) error {
	r.mu.Lock()
	r.runs++
	if li, ok := LockFromContext(ctx); ok {
		r.infos = append(r.infos, li)
	}
	fn := r.fn
	r.mu.Unlock()
	if fn != nil {
		return fn(ctx)
	}
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

// fakeEnqueuer records resubmitted tasks and rejects a repeated ID as asynq
// does. With err set, every enqueue fails with it; with lostReplies n, the
// first n enqueues store the task but report errLostReply (a reply lost on
// the way).
type fakeEnqueuer struct {
	mu          sync.Mutex
	ids         []string
	opts        [][]asynq.Option
	err         error
	lostReplies int
	calls       int
	failed      [][]asynq.Option // the options of each enqueue that failed with err
}

func (f *fakeEnqueuer) EnqueueContext(_ context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		f.failed = append(f.failed, opts)
		return nil, f.err
	}
	id := ""
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id = o.Value().(string)
		}
	}
	for _, seen := range f.ids {
		if seen == id {
			return nil, asynq.ErrTaskIDConflict
		}
	}
	f.ids = append(f.ids, id)
	f.opts = append(f.opts, opts)
	if f.lostReplies > 0 {
		f.lostReplies--
		return nil, errLostReply
	}
	return &asynq.TaskInfo{ID: id, Type: task.Type()}, nil
}

var errLostReply = errors.New("read tcp: i/o timeout")

func (f *fakeEnqueuer) stored() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// fakeInspector is a broker's view of tasks for withInspector: tasks by
// "queue/id", lookups and deletions answered from it unless err is set;
// undeletable marks tasks that are running.
type fakeInspector struct {
	mu          sync.Mutex
	tasks       map[string]asynq.TaskInfo
	undeletable map[string]bool
	err         error
	asked       []string // "queue/id" of each lookup
	deleted     []string
}

func (f *fakeInspector) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, queue+"/"+id)
	if f.err != nil {
		return nil, f.err
	}
	info, ok := f.tasks[queue+"/"+id]
	if !ok {
		return nil, fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	}
	return &info, nil
}

func (f *fakeInspector) DeleteTask(queue, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := queue + "/" + id
	switch {
	case f.err != nil:
		return f.err
	case f.undeletable[k]:
		return errors.New("asynq: cannot delete task in active state")
	}
	if _, ok := f.tasks[k]; !ok {
		return fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	}
	delete(f.tasks, k)
	f.deleted = append(f.deleted, k)
	return nil
}

// optionValues maps each option's type to its value.
func optionValues(opts []asynq.Option) map[asynq.OptionType]any {
	out := make(map[asynq.OptionType]any, len(opts))
	for _, o := range opts {
		out[o.Type()] = o.Value()
	}
	return out
}

// events collects observer events.
type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) find(kind EventKind, action string) (Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.ev {
		if ev.Kind == kind && (action == "" || ev.Action == action) {
			return ev, true
		}
	}
	return Event{}, false
}

func task(typ, payload string) *asynq.Task { return asynq.NewTask(typ, []byte(payload)) }

// withEnqueuer and withInspector stand in for the clients WithBroker makes,
// so that tests can inject failures and lost replies.
func withEnqueuer(e enqueuer) Option { return func(c *config) { c.enqueuer = e } }

func withInspector(i taskInspector) Option { return func(c *config) { c.inspector = i } }
