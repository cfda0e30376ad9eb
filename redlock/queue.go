package redlock

import (
	"crypto/rand"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

// The waiter queue keeps Acquire callers of different processes in FIFO
// order on every node; docs/design/HANDOVER.md explains the design and why it is
// safe. Each node has, per resource, a sorted set of waiters by ticket and a
// sorted set of their lease ends. A release hands the key to the queue head
// as a reservation (reservePrefix + waiter id, with the lease as TTL), which
// plain SET NX, i.e. newcomers, cannot take.

// reservePrefix starts a lock key's value while it is reserved for a queued
// waiter. Tokens (rand.Text) are upper case: they never start with it. The
// scripts (lua/turn.lua, queue_release.lua, ...) spell it out.
const reservePrefix = "queued:"

// ticket is an Acquire call's place in a resource's waiter queue: its start
// time in microseconds (the same on every node, so all nodes order the same
// waiters alike) and a random id that breaks ties and names its entries.
type ticket struct {
	score int64
	id    string
}

func newTicket() *ticket {
	return &ticket{score: time.Now().UnixMicro(), id: rand.Text()[:16]}
}

// queueKeys are the lock key, the waiter queue, the queue's lease ends and
// the fencing counter.
func (k keys) queueKeys() []string {
	return []string{k.key, k.key + ":q", k.key + ":qx", k.fenceKey}
}

// queueLease is how long a waiter's queue entry, or a reservation for it,
// lasts without being renewed: well above the longest gap between two
// attempts of a live waiter (a retry delay plus an attempt), so that only a
// waiter that is gone lets its entry lapse, and a dead waiter holds the
// others back for at most this long.
func (c *Client) queueLease() time.Duration {
	return max(500*time.Millisecond, 4*(c.cfg.retryMax+c.cfg.nodeTimeout))
}

// forWaiter makes the watch ignore releases that reserve the key for
// another waiter: they publish the reservation, and only its waiter can take
// it, so waking the others would only cost them a refused round.
func (w *watch) forWaiter(id string) {
	w.n.mu.Lock()
	w.id = id
	w.n.mu.Unlock()
}

// wants reports whether a release announcement concerns the watch's waiter.
// Called with n.mu held.
func (w *watch) wants(payload string) bool {
	id, reserved := strings.CutPrefix(payload, reservePrefix)
	id, _, _ = strings.Cut(id, "/") // a slot's: queued:<id>/<slot>
	return !reserved || w.id == "" || id == w.id
}

// turnCall builds a hand-over round's script and arguments for req (see
// turnArgs): for a slot of a limited resource, slotTurnScript, which does
// not ask the waiter queue. With rec, the releasing holder of old writes
// its completion record where old still held the key.
func (c *Client) turnCall(k keys, old, token string, req *handoffReq, keep bool, rec *completionRecord) (*transport.Script, []any) {
	lc := req.lc
	if lc.limit > 1 {
		return slotTurnScript, recordedArgs(slotTurnScript, k.bothKeys(), rec, old, token, req.ttl.Milliseconds(),
			flag(lc.fencing), c.cfg.fenceRetention.Milliseconds(), fenceClasses, lc.slot)
	}
	return turnScript, c.turnArgs(k, old, token, req.ttl, req.tk, lc, keep, rec)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// releaseArgs builds queueReleaseScript's arguments for a holder's release.
func (c *Client) releaseArgs(k keys, token string, rec *completionRecord) []any {
	return recordedArgs(queueReleaseScript, k.queueKeys()[:3], rec, token, c.queueLease().Milliseconds(), k.channel)
}

// turnReply reads one node's turnScript answer.
func turnReply(v any) (released, set bool, fence int64) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return false, false, 0
	}
	r, _ := a[0].(int64)
	s, _ := a[1].(int64)
	f, _ := a[2].(int64)
	return r == 1, s == 1, f
}

// jumped reports whether a keep-mode hand-over passed the lock ahead of a
// waiter queued on any node that answered.
func (r *round) jumped() bool {
	for _, sl := range r.slots {
		if a, ok := sl.val.([]any); ok && len(a) == 4 {
			if j, _ := a[3].(int64); j == 1 {
				return true
			}
		}
	}
	return false
}

// classifyTurn counts a node that set the new token as OK.
func classifyTurn(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if _, set, _ := turnReply(rep.Val); set {
		return outOK
	}
	return outRefused
}
