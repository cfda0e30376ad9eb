package redlock

import (
	"strings"
	"time"

	"crypto/sha1"
	"embed"
	"encoding/hex"
)

// script is a Lua script sent as EVALSHA, falling back to EVAL when a node
// does not have it cached.
type script struct {
	src string
	sha string
}

//go:embed lua/*.lua
var luaFiles embed.FS

// newScript is the script made of the named files of lua/, in order.
func newScript(files ...string) *script {
	var src strings.Builder
	for _, f := range files {
		b, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			panic("redlock: missing embedded script " + f) // a build mistake, caught by every test
		}
		src.Write(b)
	}
	sum := sha1.Sum([]byte(src.String()))
	return &script{src: src.String(), sha: hex.EncodeToString(sum[:])}
}

// args builds the EVALSHA arguments.
func (s *script) args(keys []string, argv ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, argv...)
}

// The scripts, one file each in lua/ with its KEYS/ARGV contract and
// return values in its header. The waiter-queue scripts are sent after the
// common prelude queue.lua (and, for slots, slot_queue.lua); the releases
// after their cheap unqueued case; the scripts that release a holder's
// token after record.lua, which writes its completion record in the same
// call.
var (
	releaseScript      = newScript("release.lua")
	extendScript       = newScript("extend.lua")
	fenceAcquireScript = newScript("fence_acquire.lua")
	fenceRaiseScript   = newScript("fence_raise.lua")
	inspectScript      = newScript("inspect.lua")
	turnScript         = newScript("record.lua", "queue.lua", "turn.lua")
	queueReleaseScript = newScript("record.lua", "queue_release.lua")
	leaveQueueScript   = newScript("queue.lua", "leave_queue.lua")
	slotAcquireScript  = newScript("slot_fence.lua", "slot_acquire.lua")
	slotTurnScript     = newScript("record.lua", "slot_fence.lua", "slot_turn.lua")
	slotReleaseScript  = newScript("record.lua", "slot_release_unqueued.lua", "queue.lua", "slot_queue.lua", "slot_release.lua")
	slotWaitScript     = newScript("slot_fence.lua", "queue.lua", "slot_queue.lua", "slot_wait.lua")
	slotLeaveScript    = newScript("queue.lua", "slot_queue.lua", "slot_leave.lua")
)

// allScripts are loaded on a node before its first script call.
var allScripts = []*script{releaseScript, extendScript, fenceAcquireScript, fenceRaiseScript, inspectScript, turnScript, queueReleaseScript, leaveQueueScript,
	slotAcquireScript, slotReleaseScript, slotTurnScript, slotWaitScript, slotLeaveScript, releaseManyScript}

// roundArgs builds an acquisition round's command: for a slot of a limited
// resource, slotWaitScript with a ticket, else slotAcquireScript; with a
// ticket, turnScript; with fencing, fenceAcquireScript; else a plain SET NX
// PX (s is nil).
func (c *Client) roundArgs(k keys, token string, ttl time.Duration, lc *lockConfig, tk *ticket) (s *script, args []any, classify func(reply) outcome) {
	ttlMs := ttl.Milliseconds()
	switch {
	case lc.limit > 1 && tk != nil:
		return slotWaitScript, c.slotWaitArgs(k, token, ttlMs, lc, tk), classifySet
	case tk != nil:
		return turnScript, c.turnArgs(k, "", token, ttl, tk, lc, false, nil), classifyTurn
	case lc.limit > 1 && lc.fencing:
		return slotAcquireScript, c.slotArgs(k, token, ttlMs, lc), classifySet
	case lc.fencing:
		return fenceAcquireScript, fenceAcquireScript.args(k.bothKeys(), token, ttlMs, c.cfg.fenceRetention.Milliseconds()), classifySet
	}
	return nil, []any{"set", k.key, token, "nx", "px", ttlMs}, classifySet
}

// slotWaitArgs builds slotWaitScript's arguments: a queued waiter's round
// on slot lc.slot with ticket tk.
func (c *Client) slotWaitArgs(k keys, token string, ttlMs int64, lc *lockConfig, tk *ticket) []any {
	return slotWaitScript.args(k.slotQueueKeys(int(lc.limit)), token, ttlMs, c.cfg.fenceRetention.Milliseconds(),
		lc.limit, flag(lc.fencing), fenceClasses, lc.slot, tk.score, tk.id, c.queueLease().Milliseconds(), k.channel)
}

// slotArgs builds slotAcquireScript's arguments (a fenced slot round).
func (c *Client) slotArgs(k keys, token string, ttlMs int64, lc *lockConfig) []any {
	return slotAcquireScript.args(k.bothKeys(), token, ttlMs, c.cfg.fenceRetention.Milliseconds(), fenceClasses, lc.slot)
}

// turnArgs builds turnScript's arguments; with rec, the releasing holder
// of old writes its completion record.
func (c *Client) turnArgs(k keys, old, token string, ttl time.Duration, tk *ticket, lc *lockConfig, keep bool, rec *completionRecord) []any {
	lease := c.queueLease().Milliseconds()
	return recordedArgs(turnScript, k.queueKeys(), rec, old, token, ttl.Milliseconds(), tk.score, tk.id, lease,
		flag(lc.fencing), c.cfg.fenceRetention.Milliseconds(), k.channel, flag(keep))
}

// recordedArgs builds the arguments of s, a script that releases a
// holder's token, for writing rec in the same call where the token still
// held its key (lua/record.lua): rec's set follows the script's own keys,
// and its id and window its own arguments. One
// call per node, not two: written by a script call of its own beside the
// release, a record made a lock node run 1.3 script calls per task
// through asynq instead of 0.26 (releases share calls, joinReleases)
// (bench/README.md, "Completion records"). Expiry is judged on the
// node's clock (the script reads TIME), never the writer's. A nil rec
// gives s.args.
func recordedArgs(s *script, keys []string, rec *completionRecord, argv ...any) []any {
	if rec == nil {
		return s.args(keys, argv...)
	}
	a := make([]any, 0, 4+len(keys)+len(argv)+2)
	a = append(a, "evalsha", s.sha, len(keys)+1)
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, rec.key)
	a = append(a, argv...)
	window := rec.window.Milliseconds()*runScale + int64(rec.run)
	if rec.run == forgetRun {
		window = -1
	}
	return append(a, rec.id, window)
}
