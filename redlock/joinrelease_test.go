package redlock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// joinBed is one real redis-server, a client to build calls with, and a
// node whose batches the test runs itself (no worker).
type joinBed struct {
	t   *testing.T
	c   *Client
	n   *transport.Node
	rdb *redis.Client
}

func newJoinBed(t *testing.T) *joinBed {
	srv := redistest.StartCluster(t, 1).Nodes[0]
	rdb := redis.NewClient(redistest.ClientOptions(srv.ServerAddr()))
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	n := transport.NewNode(0, srv.ServerAddr(), rdb, transportEnv)
	return &joinBed{t: t, c: c, n: n, rdb: rdb}
}

// release is a holder's release call of token on resource, writing the
// completion record of id unless it is empty.
func (b *joinBed) release(resource, token, id string, out chan transport.Reply) *transport.Call {
	var rec *completionRecord
	if id != "" {
		rec = &completionRecord{key: b.c.keysFor(resource).key + recordSuffix, id: id, window: time.Hour}
	}
	s, args := b.c.releaseCall(b.c.keysFor(resource), token, 0, 1, rec)
	return &transport.Call{Args: args, Script: s,
		Deadline: time.Now().Add(time.Minute), Owner: replies(out), Op: "release", Resource: resource}
}

// setNX is a plain acquire call on resource.
func (b *joinBed) setNX(resource, token string, out chan transport.Reply) *transport.Call {
	return &transport.Call{Args: []any{"set", b.c.keysFor(resource).key, token, "nx", "px", 60000},
		Deadline: time.Now().Add(time.Minute), Owner: replies(out), Op: "acquire", Resource: resource}
}

func (b *joinBed) evalshas() int64 {
	info, err := b.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "cmdstat_evalsha:calls=")
	n, _ := strconv.ParseInt(rest[:strings.IndexAny(rest+",", ",")], 10, 64)
	return n
}

func (b *joinBed) set(key, val string) {
	if err := b.rdb.Set(context.Background(), key, val, time.Minute).Err(); err != nil {
		b.t.Fatal(err)
	}
}

// TestBatchReleasesShareOneScriptCall: the releases of one batch run as one
// script call, each with its own answer (released, not ours, reserved for a
// queued waiter), while a release that a later call of the batch depends on
// keeps its place. Also after the node lost its scripts.
func TestBatchReleasesShareOneScriptCall(t *testing.T) {
	b := newJoinBed(t)
	for _, flush := range []bool{false, true} {
		if flush {
			if err := b.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		b.set(b.c.keysFor("a").key, "ta")
		b.set(b.c.keysFor("b").key, "tb")
		b.set(b.c.keysFor("c").key, "someone-else")
		b.set(b.c.keysFor("d").key, "td")
		b.set(b.c.keysFor("e").key, "te")
		k := b.c.keysFor("d") // a waiter is queued for d
		if err := b.rdb.ZAdd(context.Background(), k.key+":q", redis.Z{Score: 1, Member: "w1"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.ZAdd(context.Background(), k.key+":qx", redis.Z{Score: 1e15, Member: "w1"}).Err(); err != nil {
			t.Fatal(err)
		}
		sub := b.rdb.Subscribe(context.Background(), k.channel)
		if _, err := sub.Receive(context.Background()); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		outs := make([]chan transport.Reply, 7)
		for i := range outs {
			outs[i] = make(chan transport.Reply, 1)
		}
		calls := []*transport.Call{
			b.release("e", "te", "", outs[0]), // must run before the SET of e
			b.setNX("e", "te2", outs[1]),
			b.release("a", "ta", "", outs[2]),
			b.setNX("f", "tf", outs[3]),
			b.release("b", "tb", "rb", outs[4]),
			b.release("c", "tc", "rc", outs[5]),
			b.release("d", "td", "rd", outs[6]),
		}
		before := b.evalshas()
		b.n.Exec(slices.Clone(calls))
		want := map[string]int64{"e": 1, "a": 1, "b": 1, "c": 0, "d": 1}
		for i, c := range calls {
			rep := <-outs[i]
			if c.Script == nil {
				// After a NOSCRIPT the scripts run again after the batch
				// (node.execBatch), so only the first pass keeps e's order.
				if !flush && (rep.Err != nil || rep.Val != "OK") {
					t.Errorf("flush %v: SET of %s answered %v, %v; want OK after e's release", flush, c.Resource, rep.Val, rep.Err)
				}
				continue
			}
			if rep.Err != nil || rep.Val != want[c.Resource] {
				t.Errorf("flush %v: release of %s answered %v, %v; want %d", flush, c.Resource, rep.Val, rep.Err, want[c.Resource])
			}
		}
		// e's release, then one call for a, b, c and d (after a NOSCRIPT
		// the two are sent again as EVAL, which is not counted here).
		if got := b.evalshas() - before; got != 2 {
			t.Errorf("flush %v: %d script calls for 5 releases, want 2", flush, got)
		}
		if v, _ := b.rdb.Get(context.Background(), k.key).Result(); v != reservePrefix+"w1" {
			t.Errorf("flush %v: d's key holds %q after its release, want the reservation for w1", flush, v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		msg, err := sub.ReceiveMessage(ctx)
		cancel()
		_ = sub.Close()
		if err != nil || msg.Payload != reservePrefix+"w1" {
			t.Errorf("flush %v: d's release announced %v, %v; want the reservation for w1 on %s", flush, msg, err, k.channel)
		}
		for _, r := range []string{"a", "b"} {
			if n, _ := b.rdb.Exists(context.Background(), b.c.keysFor(r).key).Result(); n != 0 {
				t.Errorf("flush %v: %s's key is still there after its release", flush, r)
			}
		}
		if v, _ := b.rdb.Get(context.Background(), b.c.keysFor("c").key).Result(); v != "someone-else" {
			t.Errorf("flush %v: c's key of another holder became %q", flush, v)
		}
		// b and d were released (d reserved for its waiter), c's key was
		// another holder's: every record is written (a release's record
		// goes to every node it reaches, its key there or not).
		for r, want := range map[string]bool{"b": true, "c": true, "d": true} {
			err := b.rdb.ZScore(context.Background(), b.c.keysFor(r).key+recordSuffix, "r"+r).Err()
			if got := err == nil; got != want {
				t.Errorf("flush %v: record of %s's release found %v (%v), want %v", flush, r, got, err, want)
			}
		}
		if err := b.rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJoinedReleaseFailureReachesEveryCaller: when the shared call fails,
// every release folded into it gets the failure.
func TestJoinedReleaseFailureReachesEveryCaller(t *testing.T) {
	b := newJoinBed(t)
	outs := []chan transport.Reply{make(chan transport.Reply, 1), make(chan transport.Reply, 1)}
	calls := []*transport.Call{b.release("a", "ta", "", outs[0]), b.release("b", "tb", "rb", outs[1])}
	b.n.Do = func(ctx context.Context, cmds []*redis.Cmd) {
		for _, cmd := range cmds {
			cmd.SetErr(redis.ErrClosed)
		}
	}
	b.n.Exec(slices.Clone(calls))
	for i, c := range calls {
		if rep := <-outs[i]; rep.Err == nil {
			t.Errorf("release of %s answered %v without the failure", c.Resource, rep.Val)
		}
	}
}
