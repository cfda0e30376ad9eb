package redlock

import (
	"embed"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock/internal/transport"
)

//go:embed lua/*.lua
var luaFiles embed.FS

func newScript(file string) *transport.Script {
	b, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		panic("redlock: missing embedded script " + file) // a build mistake, caught by every test
	}
	return transport.NewScript(string(b))
}

func scriptArgs(s *transport.Script, keys []string, argv ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", s.SHA, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, argv...)
}

// The scripts, one file each in lua/ with its KEYS/ARGV contract in its
// header; release_many.lua runs a batch's queue releases in one call.
var (
	releaseScript      = newScript("release.lua")
	extendScript       = newScript("extend.lua")
	fenceAcquireScript = newScript("fence_acquire.lua")
	fenceRaiseScript   = newScript("fence_raise.lua")
	inspectScript      = newScript("inspect.lua")
	turnScript         = newScript("turn.lua")
	queueReleaseScript = newScript("queue_release.lua")
	leaveQueueScript   = newScript("leave_queue.lua")
	slotTurnScript     = newScript("slot_turn.lua")
	slotReleaseScript  = newScript("slot_release.lua")
	slotWaitScript     = newScript("slot_wait.lua")
	slotLeaveScript    = newScript("slot_leave.lua")
	releaseManyScript  = newScript("release_many.lua")
)

var transportEnv = &transport.Env{
	Scripts: []*transport.Script{releaseScript, extendScript, fenceAcquireScript, fenceRaiseScript, inspectScript,
		turnScript, queueReleaseScript, leaveQueueScript, slotReleaseScript, slotTurnScript, slotWaitScript,
		slotLeaveScript, releaseManyScript},
	Closed: errClosed, Release: queueReleaseScript, ReleaseMany: releaseManyScript,
	ChannelSuffix: channelSuffix, LookScore: lookScore}

// roundArgs builds an acquisition round's command: with a ticket,
// slotWaitScript (a slot) or turnScript; with fencing, fenceAcquireScript
// (a slot's with its fence class); else a plain SET NX PX (s is nil).
func (c *Client) roundArgs(k keys, token string, ttl time.Duration, lc *lockConfig, tk *ticket) (s *transport.Script, args []any, classify func(transport.Reply) outcome) {
	ttlMs := ttl.Milliseconds()
	switch {
	case lc.limit > 1 && tk != nil:
		args = scriptArgs(slotWaitScript, k.slotQueueKeys(int(lc.limit)), token, ttlMs, fenceRetentionMs,
			lc.limit, flag(lc.fencing), fenceClasses, lc.slot, tk.score, tk.id, c.queueLease().Milliseconds(), k.channel)
		return slotWaitScript, args, classifySet
	case tk != nil:
		return turnScript, c.turnArgs(k, "", token, ttl, tk, lc, false, nil), classifyTurn
	case lc.limit > 1 && lc.fencing:
		args = scriptArgs(fenceAcquireScript, k.bothKeys(), token, ttlMs, fenceRetentionMs, fenceClasses, lc.slot)
		return fenceAcquireScript, args, classifySet
	case lc.fencing:
		return fenceAcquireScript, scriptArgs(fenceAcquireScript, k.bothKeys(), token, ttlMs, fenceRetentionMs), classifySet
	}
	return nil, []any{"set", k.key, token, "nx", "px", ttlMs}, classifySet
}

// slotQueueKeys are the slot scripts' keys: the resource's lock key, its
// waiter queue, the fencing counter, then every slot key.
func (k keys) slotQueueKeys(limit int) []string {
	base := k.baseKey()
	names := make([]string, 4, 4+limit)
	names[0], names[1], names[2], names[3] = base, base+":q", base+":qx", k.fenceKey
	for i := range limit {
		names = append(names, slotKey(base, i))
	}
	return names
}

// baseKey is the resource's own lock key, slot 0's.
func (k keys) baseKey() string { return strings.TrimSuffix(k.fenceKey, fenceSuffix) }

// turnArgs builds turnScript's arguments; with rec, old's holder writes it.
func (c *Client) turnArgs(k keys, old, token string, ttl time.Duration, tk *ticket, lc *lockConfig, keep bool, rec *completionRecord) []any {
	lease := c.queueLease().Milliseconds()
	return recordedArgs(turnScript, k.queueKeys(), rec, old, token, ttl.Milliseconds(), tk.score, tk.id, lease,
		flag(lc.fencing), fenceRetentionMs, k.channel, flag(keep))
}

// recordedArgs builds the arguments of s, a release writing rec (if not
// nil): its key after s's keys, its id and window after s's arguments.
func recordedArgs(s *transport.Script, keys []string, rec *completionRecord, argv ...any) []any {
	if rec == nil {
		return scriptArgs(s, keys, argv...)
	}
	window := rec.window.Milliseconds()*runScale + int64(rec.run)
	if rec.run == forgetRun {
		window = -1
	}
	a := scriptArgs(s, keys, argv...)
	a[2] = len(keys) + 1
	a = slices.Insert(a, 3+len(keys), any(rec.key))
	return append(a, rec.id, window)
}

// leaveQueue takes waiter tk (nil: none) out of the queue of k's resource on
// the nodes in mask, without waiting for the answers.
func (c *Client) leaveQueue(k keys, tk *ticket, limit int, mask uint64) {
	if mask == 0 || tk == nil || c.isClosed() {
		return
	}
	s, args := slotLeaveScript, []any(nil)
	if limit > 1 {
		args = scriptArgs(s, k.slotQueueKeys(limit), tk.id, limit, k.channel)
	} else {
		s = leaveQueueScript
		args = scriptArgs(s, k.queueKeys()[:3], tk.id, c.queueLease().Milliseconds(), k.channel)
	}
	c.broadcast("dequeue", k.resource, mask, 1, time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
}

// undo releases a failed attempt's token on every node its SET was queued
// for, even one that answered another holder's: a retried command may have
// set our key. Nodes run calls in order: the undo follows its SET.
func (c *Client) undo(k keys, token string, unsent uint64, limit int) {
	mask := c.allNodes() &^ unsent
	if mask == 0 || c.isClosed() {
		return
	}
	s, args := releaseScript, []any(nil)
	if limit > 1 {
		slot, _ := strconv.Atoi(strings.TrimPrefix(k.key, k.baseKey()+slotSuffix)) // 0 for the base key
		s, args = c.slotRelease(k, token, "", slot, limit, nil)
	} else {
		args = scriptArgs(releaseScript, k.lockKeys(), token, "")
	}
	c.broadcast("release", k.resource, mask, bits.OnesCount64(mask), time.Now().Add(c.cfg.nodeTimeout), true, args, s).free()
}

// slotRelease builds the release of slot key k for token: deleted, or
// reserved for the resource's waiters and announced on channel ("": none).
func (c *Client) slotRelease(k keys, token, channel string, slot, limit int, rec *completionRecord) (*transport.Script, []any) {
	return slotReleaseScript, recordedArgs(slotReleaseScript, k.slotQueueKeys(limit), rec, token, strconv.Itoa(slot), limit,
		c.queueLease().Milliseconds(), channel)
}
