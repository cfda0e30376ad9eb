package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The design of WithLimit, tested against the obvious alternative that is
// wrong (docs/design/REDLOCK.md, "Limits"): a counter of holders on each node,
// capped at n, held with a majority of nodes admitting. When (n+1)·q <= n·N
// the n+1 holders' majorities can be disjoint enough to fit into the nodes'
// capacity: with N = 5, q = 3 and n = 2, nine admissions fit into ten. Both
// designs run here on the same five nodes, with the same reachability (a
// holder's calls reach only some nodes, as in a partition or when its calls
// to the others time out).

// counterLua is the rejected design: admit the token if fewer than n
// holders are counted on this node.
const counterLua = `if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then
	redis.call('SADD', KEYS[1], ARGV[1])
	return 1
end
return 0`

// controlNodes starts n redis-server nodes and returns raw clients to them.
func controlNodes(t *testing.T, n int) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, n)
	for i := range out {
		srv := redistest.StartServer(t)
		out[i] = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}

// counterHolds makes one counter-design acquisition reaching the nodes in
// reach, and reports whether a majority admitted it.
func counterHolds(t *testing.T, nodes []*redis.Client, reach []int, token string, n int) bool {
	t.Helper()
	ok := 0
	for _, i := range reach {
		v, err := nodes[i].Eval(context.Background(), counterLua, []string{"counter"}, token, n).Int()
		if err != nil {
			t.Fatal(err)
		}
		ok += v
	}
	return ok >= quorum(len(nodes))
}

// slotHolds makes one acquisition of the design that is built, slot after
// slot as try does, reaching the nodes in reach with SET NX PX,
// undoing a slot that missed its majority; it returns the slot held or -1.
func slotHolds(t *testing.T, nodes []*redis.Client, reach []int, token string, n int) int {
	t.Helper()
	ctx := context.Background()
	k := keyOf(defaultPrefix, "r")
	for s := range n {
		ok := 0
		for _, i := range reach {
			set, err := nodes[i].SetNX(ctx, slotKey(k, s), token, time.Minute).Result()
			if err != nil {
				t.Fatal(err)
			}
			if set {
				ok++
			}
		}
		if ok >= quorum(len(nodes)) {
			return s
		}
		for _, i := range reach {
			nodes[i].Eval(ctx, releaseScript.Src, []string{slotKey(k, s)}, token, "")
		}
	}
	return -1
}

// TestControlCounterQuorumAdmitsNPlusOne is the failing control: the
// counter design admits three holders with n = 2 (their majorities are
// {0,1,2}, {2,3,4} and {0,1,3,4}), the slot design on the same
// reachability admits two.
func TestControlCounterQuorumAdmitsNPlusOne(t *testing.T) {
	const n = 2
	reach := [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 2, 3, 4}}
	nodes := controlNodes(t, 5)
	counter := 0
	for h, r := range reach {
		if counterHolds(t, nodes, r, fmt.Sprint("c", h), n) {
			counter++
		}
	}
	if counter != n+1 {
		t.Fatalf("the counter design admitted %d holders with n = %d; the control expects n+1 = %d", counter, n, n+1)
	}
	t.Logf("control: a counter with a majority quorum admitted %d holders with n = %d on 5 nodes", counter, n)
	slots := 0
	for h, r := range reach {
		if slotHolds(t, nodes, r, fmt.Sprint("s", h), n) >= 0 {
			slots++
		}
	}
	if slots != n {
		t.Fatalf("the slot design admitted %d holders with n = %d, want %d", slots, n, n)
	}
}

// TestSlotDesignNeverAdmitsMoreThanN: over random reachabilities and
// orders of arrival, slots never have more than n holders with a majority,
// where the counter design, on the same histories, sometimes has.
func TestSlotDesignNeverAdmitsMoreThanN(t *testing.T) {
	const n, holders, trials = 2, 4, 60
	rng := rand.New(rand.NewPCG(21, 1))
	nodes := controlNodes(t, 5)
	counterOver := 0
	for trial := range trials {
		for _, nd := range nodes {
			if err := nd.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		reach := make([][]int, holders)
		for h := range reach {
			reach[h] = rng.Perm(5)[:3+rng.IntN(3)] // a majority or more reachable, in a random order
		}
		counter, slots := 0, map[int]int{}
		for h, r := range reach {
			if counterHolds(t, nodes, r, fmt.Sprint("c", h), n) {
				counter++
			}
			if s := slotHolds(t, nodes, r, fmt.Sprint("s", h), n); s >= 0 {
				slots[s]++
			}
		}
		total := 0
		for s, c := range slots {
			if c > 1 {
				t.Fatalf("trial %d: slot %d has %d holders with a majority", trial, s, c)
			}
			total += c
		}
		if total > n {
			t.Fatalf("trial %d: %d slot holders with n = %d", trial, total, n)
		}
		if counter > n {
			counterOver++
		}
	}
	t.Logf("the counter design admitted more than n = %d holders in %d of %d trials; slots never did", n, counterOver, trials)
}
