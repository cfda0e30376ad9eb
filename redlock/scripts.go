package redlock

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
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
