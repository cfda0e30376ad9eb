package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// fakeInspector is a broker's view of tasks for withInspector: tasks by
// "queue/id", lookups and deletions answered from it unless err is set;
// undeletable marks tasks that are running.
type fakeInspector struct {
	mu    sync.Mutex
	tasks map[string]asynq.TaskInfo
	err   error
	asked []string // "queue/id" of each lookup
	ran   []string // "queue/id" of each task RunTask moved
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

// RunTask moves an archived or retrying task to pending, as asynq's does.
func (f *fakeInspector) RunTask(queue, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := queue + "/" + id
	info, ok := f.tasks[k]
	switch {
	case f.err != nil:
		return f.err
	case !ok:
		return fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	case info.State == asynq.TaskStateActive || info.State == asynq.TaskStatePending:
		return errors.New("asynq: task is already running")
	}
	info.State = asynq.TaskStatePending
	f.tasks[k] = info
	f.ran = append(f.ran, k)
	return nil
}

// set stores a task's state and last error.
func (f *fakeInspector) set(queue, id string, st asynq.TaskState, lastErr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tasks == nil {
		f.tasks = map[string]asynq.TaskInfo{}
	}
	f.tasks[queue+"/"+id] = asynq.TaskInfo{ID: id, Queue: queue, State: st, LastErr: lastErr}
}

func (f *fakeInspector) runs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ran)
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

func (e *events) find(kind string, action string) (Event, bool) {
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

// withInspector stands in for the inspector WithBroker makes, so that
// tests can see and inject its calls.
func withInspector(i taskInspector) Option { return func(c *config) { c.inspector = i } }

// forceWait counts a waiter of res whatever the bounds, the cap across
// resources included, as enterWait does, and returns its entry.
func (m *mw) forceWait(res string) *resState {
	m.cfg.room.wait.force(res, m.cfg.limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	e.waiters++
	e.contention(time.Now())
	return e
}

// onTurn shows the promoter a start (id) or an end of res.
func (m *mw) onTurn(end bool, queue, res, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(res)
	defer m.touched(res, e)
	m.turn(res, e, queue, id, end)
}

// ranFor has a task of no queue hold res for d, ending now.
func (m *mw) ranFor(res string, d time.Duration) {
	e, _ := m.countHolder(res, "", "")
	m.ended(res, e, "", time.Now().Add(-d))
}

// holding counts a holder of res with no start seen (no queue).
func (m *mw) holding(res string) *resState {
	e, _ := m.countHolder(res, "", "")
	return e
}

// promoteDepth and freshShare are the room's for m's resources.
func (m *mw) promoteDepth(res string) depths {
	return m.cfg.room.promoteDepth(res, m.cfg.limit, m.atOnce == nil)
}

func (m *mw) freshShare(res string, soft bool) int {
	return m.cfg.room.freshShare(res, m.cfg.limit, soft)
}

// force takes a slot for a waiter of res whatever the cap.
func (c *waitCap) force(res string, limit int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.add(res, c.per[res], limit)
	c.mu.Unlock()
}
