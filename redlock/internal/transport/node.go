// Package transport carries redlock's calls to its nodes: one worker per node
// sends concurrent calls as one pipeline, in order (docs/design/BATCHING.md).
package transport

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/redis/go-redis/v9"
)

const (
	maxBatch = 128 // calls in one pipeline
	// QueueLen bounds the calls waiting for a node; past it a call fails at
	// once, but a cleanup call still queues.
	QueueLen = 4096
)

// ErrNodeTimeout is a node's failure to answer within the node timeout.
var ErrNodeTimeout = errors.New("no answer within the node timeout")

var errQueueFull = errors.New("too many calls waiting for this node")

// Env is what the algorithm tells every node of its scripts, once.
type Env struct {
	Scripts              []*Script // loaded on a node before its first script call
	Closed               error     // the answer to calls on a closed client
	Release, ReleaseMany *Script   // a batch's Release calls share one ReleaseMany; nil: none do
	ChannelSuffix        string    // follows a lock key in its release channel's name
	// LookScore reads a look-up's answer: the record's score and Unix ms expiry.
	LookScore func(v any) (score, expiry int64, ok bool)
}

// Script is a Lua script sent as EVALSHA, or EVAL when a node lacks it.
type Script struct{ Src, SHA string }

func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(sum[:])}
}

// Node is one independent Redis master, served by one worker.
type Node struct {
	Idx    int
	Addr   string
	Client redis.UniversalClient
	env    *Env
	// queue holds the calls waiting, in order; wake has a token once some
	// were queued since the worker last waited.
	mu     sync.Mutex
	queue  []*Call
	wake   chan struct{}
	single bool // a single server: it holds all of a batch's keys, so releases may join
	// Worker-owned, reused from batch to batch.
	loaded                       bool // the node's script cache holds our scripts
	conn                         *redis.Conn
	proc                         func(context.Context, redis.Cmder) error
	pipe                         redis.Pipeliner
	cmders                       []redis.Cmder
	fold                         Call // the call of a batch's joined releases
	foldArgs, foldKeys, foldArgv []any
	foldFlags                    []byte
	recent                       bool // the previous batch, sent at sent, carried several
	sent                         time.Time
	// Set by the client before Serve.
	Failed func(op, resource string, node int, err error)
	Debug  func(msg string, args ...any)                // nil: no debug logs
	Window time.Duration                                // the batch window
	Busy   *atomic.Int64                                // the client's held locks and waiting callers
	Do     func(ctx context.Context, cmds []*redis.Cmd) // run; an in-memory node in tests
}

// NewNode is node idx, named addr in errors and logs, over client cl.
func NewNode(idx int, addr string, cl redis.UniversalClient, env *Env) *Node {
	_, single := cl.(*redis.Client)
	n := &Node{Idx: idx, Addr: addr, Client: cl, env: env, single: single,
		wake: make(chan struct{}, 1)}
	n.Do = n.run
	return n
}

// Owner is the round that sent a call: it gets the reply, then is let go of.
type Owner interface {
	Arrive(Reply)
	Unref()
}

// Call is one command for one node; its reply goes to Owner.
type Call struct {
	Node     int
	Args     []any
	Script   *Script // set when Args is an EVALSHA of this script
	Deadline time.Time
	Cleanup  bool // send even past the deadline: it only removes our keys
	Owner    Owner
	Op       string // for error reports
	Resource string
	joined   []*Call // the releases this call runs for (joinReleases)
	Look     []any   // a look-up sent after the batch in its pipeline (look.go)
	seen     int64   // what Look found: the record's score, 0 for none
}

// Reply is a node's answer to a call.
type Reply struct {
	Node int
	Val  any
	Err  error // redis.Nil for a nil reply
	Seen int64 // the call's look-up found its record: its score (look.go)
}

// deliver sends the reply; after it the node touches the call no more.
func (c *Call) deliver(rep Reply) {
	rep.Seen = c.seen
	owner := c.Owner
	owner.Arrive(rep)
	owner.Unref()
}

// Send queues a call without blocking and reports whether it did; a closed
// client or a full queue answers it at once, but a cleanup call always queues
// (an acquire already on the wire would leave its key behind).
func (n *Node) Send(c *Call, closed <-chan struct{}) bool {
	select {
	case <-closed:
		c.deliver(Reply{Node: c.Node, Err: n.env.Closed})
		return false
	default:
	}
	n.mu.Lock()
	if len(n.queue) >= QueueLen && !c.Cleanup {
		n.mu.Unlock()
		c.deliver(Reply{Node: c.Node, Err: errQueueFull})
		return false
	}
	n.queue = append(n.queue, c)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	return true
}

// take moves the oldest waiting calls into batch, up to maxBatch.
func (n *Node) take(batch []*Call) []*Call {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := min(len(n.queue), maxBatch-len(batch))
	batch = append(batch, n.queue[:k]...)
	clear(n.queue[:k])
	if k == len(n.queue) {
		n.queue = n.queue[:0] // the array is reused from its start
	} else {
		n.queue = n.queue[k:]
	}
	return batch
}

// Serve runs the node's worker until closed, then answers what is left; it
// calls warmed after warming the node up.
func (n *Node) Serve(closed <-chan struct{}, wg *sync.WaitGroup, warmed func()) {
	defer wg.Done()
	defer n.closeConn()
	n.warmUp()
	warmed()
	batch := make([]*Call, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-closed:
			n.refuseAll()
			return
		default:
		}
		if batch = n.take(batch); len(batch) == 0 {
			select {
			case <-n.wake:
			case <-closed:
			}
			continue
		}
		batch = n.gather(batch, linger, closed)
		now := time.Now()
		n.recent, n.sent = len(batch) > 1, now
		n.execBatch(batch, now)
		clear(batch)
		batch = batch[:0]
	}
}

// warmUp dials the node and loads the scripts before any call needs them
// (issue 20); a failure leaves the work to the first batch.
func (n *Node) warmUp() {
	ctx := context.Background()
	if n.Client == nil || n.loadEveryMaster(ctx) {
		return
	}
	cmds := n.scriptLoads(ctx, make([]*redis.Cmd, len(n.env.Scripts)))
	n.Do(ctx, cmds)
	n.loaded = succeeded(cmds)
}

func (n *Node) scriptLoads(ctx context.Context, cmds []*redis.Cmd) []*redis.Cmd {
	for i := range cmds {
		cmds[i] = redis.NewCmd(ctx, "script", "load", n.env.Scripts[i].Src)
	}
	return cmds
}

// loadEveryMaster loads the scripts on every master of a cluster node (a
// SCRIPT LOAD in a pipeline reaches one shard); false for other nodes.
func (n *Node) loadEveryMaster(ctx context.Context) bool {
	cc, ok := n.Client.(*redis.ClusterClient)
	if !ok {
		return false
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		p := m.Pipeline()
		for _, s := range n.env.Scripts {
			p.ScriptLoad(ctx, s.Src)
		}
		_, err := p.Exec(ctx)
		return err
	})
	n.loaded = err == nil
	return true
}

func succeeded(cmds []*redis.Cmd) bool {
	return !slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool { return cmd.Err() != nil })
}

func (n *Node) refuseAll() {
	for batch := n.take(nil); len(batch) > 0; batch = n.take(nil) {
		for _, c := range batch {
			c.deliver(Reply{Node: c.Node, Err: n.env.Closed})
		}
	}
}

// lingerMemory is how many windows after a batch of several calls the
// worker still expects calls to overlap.
const lingerMemory = 10

// gather waits up to the batch window for more calls while calls overlap on
// the node and Busy exceeds the batch, never closer than one window to a
// call's deadline (BATCHING.md).
func (n *Node) gather(batch []*Call, t *time.Timer, closed <-chan struct{}) []*Call {
	if n.Window <= 0 || n.Busy == nil || !n.recent || n.Busy.Load() <= int64(len(batch)) ||
		time.Since(n.sent) > lingerMemory*n.Window {
		return batch
	}
	now := time.Now()
	end := now.Add(n.Window)
	for _, c := range batch {
		end = n.lingerEnd(end, c)
	}
	if !end.After(now) {
		return batch
	}
	t.Reset(end.Sub(now))
	defer t.Stop()
	for len(batch) < maxBatch && n.Busy.Load() > int64(len(batch)) {
		select {
		case <-n.wake:
			k, was := len(batch), end
			batch = n.take(batch)
			for _, c := range batch[k:] {
				end = n.lingerEnd(end, c)
			}
			if end.Before(was) { // Reset only when the end moves: 0.1µs a call
				left := time.Until(end)
				if left <= 0 {
					return batch
				}
				t.Reset(left)
			}
		case <-t.C:
			return batch
		case <-closed:
			return batch
		}
	}
	return batch
}

// lingerEnd moves end one window before c's deadline; cleanups have none.
func (n *Node) lingerEnd(end time.Time, c *Call) time.Time {
	if lim := c.Deadline.Add(-n.Window); !c.Cleanup && lim.Before(end) {
		return lim
	}
	return end
}

// execBatch sends a batch as one pipeline, but for the calls past their deadline.
func (n *Node) execBatch(batch []*Call, now time.Time) {
	live := n.joinReleases(expire(batch, now))
	if len(live) == 0 {
		return
	}
	ctx := context.Background() // no per-batch deadline (BATCHING.md)
	script := slices.ContainsFunc(live, func(c *Call) bool { return c.Script != nil })
	pre := 0
	if script && !n.loaded && !n.loadEveryMaster(ctx) {
		pre = len(n.env.Scripts)
	}
	cmds := make([]*redis.Cmd, pre+len(live), pre+2*len(live)) // room for a look-up per call
	n.scriptLoads(ctx, cmds[:pre])
	for i, c := range live {
		cmds[pre+i] = redis.NewCmd(ctx, c.Args...)
		if c.Look != nil {
			cmds = append(cmds, redis.NewCmd(ctx, c.Look...))
		}
	}
	n.Do(ctx, cmds)
	if pre > 0 {
		n.loaded = succeeded(cmds[:pre])
	}
	calls := cmds[pre : pre+len(live)]
	n.readLooks(live, calls, cmds[pre+len(live):])
	var retry []*Call
	for i, c := range live {
		err := calls[i].Err() // HasErrorPrefix allocates, even for nil
		if c.Script != nil && err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, c)
			continue
		}
		n.answer(c, calls[i].Val(), nodeErr(err))
	}
	if len(retry) > 0 {
		n.evalSource(ctx, retry, cmds[:len(retry)])
	}
}

// expire answers the calls whose deadline passed while they queued and
// returns the others in batch's array.
func expire(batch []*Call, now time.Time) []*Call {
	live := batch[:0]
	for _, c := range batch {
		if !c.Cleanup && !now.Before(c.Deadline) {
			c.deliver(Reply{Node: c.Node, Err: ErrNodeTimeout})
			continue
		}
		live = append(live, c)
	}
	return live
}

// evalSource answers calls that met NOSCRIPT (a restart, SCRIPT FLUSH) by
// sending their scripts' source; the next batch loads every script.
func (n *Node) evalSource(ctx context.Context, calls []*Call, cmds []*redis.Cmd) {
	n.loaded = false
	for i, c := range calls {
		cmds[i] = redis.NewCmd(ctx, append([]any{"eval", c.Script.Src}, c.Args[2:]...)...)
	}
	n.Do(ctx, cmds)
	for i, c := range calls {
		n.answer(c, cmds[i].Val(), nodeErr(cmds[i].Err()))
	}
}

func (n *Node) answer(c *Call, val any, err error) {
	if c.joined != nil {
		n.answerJoined(c, val, err)
		return
	}
	err = n.movedHint(err)
	if err != nil && err != redis.Nil && n.Failed != nil {
		n.Failed(c.Op, c.Resource, c.Node, err)
	}
	c.deliver(Reply{Node: c.Node, Val: val, Err: err})
}

// movedHint names the fix on a MOVED answer from a node given as a single
// server: a Redis Cluster member.
func (n *Node) movedHint(err error) error {
	if err == nil || !n.single || !redis.HasErrorPrefix(err, "MOVED") {
		return err
	}
	return fmt.Errorf("%w (a Redis Cluster member given as a single server: "+
		"write the node as redis-cluster://%s)", err, n.Addr)
}

// run is Do on the node's client: a batch as one pipeline.
func (n *Node) run(ctx context.Context, cmds []*redis.Cmd) {
	if n.pipe == nil {
		n.proc, n.pipe = n.Client.Process, n.Client.Pipeline()
		if rc, ok := n.Client.(*redis.Client); ok {
			// One batch at a time: no pool round trip, no health check.
			n.conn = rc.Conn()
			n.proc, n.pipe = n.conn.Process, n.conn.Pipeline()
		}
	}
	if len(cmds) == 1 {
		_ = n.proc(ctx, cmds[0])
	} else {
		for _, cmd := range cmds {
			n.cmders = append(n.cmders, cmd)
		}
		_ = n.pipe.BatchProcess(ctx, n.cmders...)
		clear(n.cmders)
		n.cmders = n.cmders[:0]
		_, _ = n.pipe.Exec(ctx)
	}
	if !connBroken(cmds) {
		return
	}
	n.closeConn() // the next batch gets a fresh connection
	if cc, ok := n.Client.(*redis.ClusterClient); ok {
		// A shard's master may have failed over (docs/guide/OPERATIONS.md).
		if n.Debug != nil {
			n.Debug("redlock cluster node: a shard failed on the connection; reloading the slot map",
				"node", n.Idx, "addr", n.Addr)
		}
		cc.ReloadState(ctx)
	}
}

// connBroken is whether a batch failed on the connection, not with Redis errors.
func connBroken(cmds []*redis.Cmd) bool {
	return slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			var re redis.Error // escapes: declared on the failing path only
			return !errors.As(err, &re)
		}
		return false
	})
}

func (n *Node) closeConn() {
	if n.conn != nil {
		_ = n.conn.Close()
	}
	n.conn, n.proc, n.pipe = nil, nil, nil
}

// nodeErr keeps per-node failures from posing as the caller's context errors.
func nodeErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (%s)", ErrNodeTimeout, strings.TrimSpace(err.Error()))
	}
	return err
}

// NodeAddr names node i on client c for errors and logs, without credentials.
func NodeAddr(i int, c redis.UniversalClient) string {
	if a := lockutil.Addr(c); a != "" {
		return a
	}
	return fmt.Sprintf("node%d", i)
}

// Exec runs calls as one batch on the caller's goroutine, for tests; the
// node's worker must not be serving.
func (n *Node) Exec(calls []*Call) {
	n.execBatch(calls, time.Now())
	n.closeConn()
}
