package redlock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// releaseManyScript runs several queue releases in one call (lua/release_many_head.lua).
var releaseManyScript = newScript("release_many_head.lua", "queue.lua", "queue_release.lua", "release_many_tail.lua")

// releaseArgc is the length of a queueReleaseScript call's arguments:
// evalsha, sha, numkeys, three keys, three arguments.
const releaseArgc = 9

// joinReleases folds a batch's releases into one releaseManyScript call,
// sent where the last of them stands: the node sets up one script call per
// batch instead of one per release (about a tenth of its CPU per lock with
// 32 concurrent callers, docs/BATCHING.md). A release only
// moves later, and only past calls on other resources: one that a later
// call of the batch names stays where it is, so every resource sees its
// calls in the order they were queued. Standalone nodes only: a cluster
// node's keys may live on different shards.
func (n *node) joinReleases(live []*call) []*call {
	if !n.joins || len(live) > maxBatch {
		return live
	}
	last, count := -1, 0
	var lease any
	for i, c := range live {
		if joinable(c, lease) {
			last, count, lease = i, count+1, c.args[7]
		}
	}
	if count < 2 {
		return live
	}
	var join [maxBatch]bool
	var seen [maxBatch]string
	named := seen[:0] // resources of the other calls after the one at hand, up to last
	count = 0
	for i := last; i >= 0; i-- {
		c := live[i]
		switch {
		case !joinable(c, lease):
			named = append(named, c.resource)
		case !slices.Contains(named, c.resource):
			join[i], count = true, count+1
		}
	}
	if count < 2 {
		return live
	}
	return n.foldReleases(live, join[:len(live)], last, count)
}

// foldReleases replaces the releases marked in join by one call at last.
func (n *node) foldReleases(live []*call, join []bool, last, count int) []*call {
	all := &n.fold // the worker's: one fold per batch
	*all = call{node: n.idx, script: releaseManyScript, op: "release", joined: all.joined[:0]}
	if need := 3 + 4*count + 1; cap(n.foldArgs) >= need {
		all.args = n.foldArgs[:need]
	} else {
		all.args = make([]any, need)
		n.foldArgs = all.args
	}
	all.args[0], all.args[1], all.args[2] = "evalsha", releaseManyScript.sha, 3*count
	keys, tokens := all.args[3:3+3*count], all.args[3+3*count:]
	out := live[:0]
	for i, c := range live {
		if !join[i] {
			out = append(out, c)
			continue
		}
		j := len(all.joined)
		copy(keys[3*j:3*j+3], c.args[3:6])
		tokens[j], tokens[count] = c.args[6], c.args[7] // the token; the lease, the same for all
		all.joined = append(all.joined, c)
		if i == last {
			out = append(out, all)
		}
	}
	return out
}

// joinable is whether c is a queue release that may share a call: one
// that announces on its key's channel, with the lease of the others (nil
// for the first).
func joinable(c *call, lease any) bool {
	if c.script != queueReleaseScript || len(c.args) != releaseArgc {
		return false
	}
	key, _ := c.args[3].(string)
	ch, _ := c.args[8].(string)
	rest, ok := strings.CutPrefix(ch, key)
	return ok && key != "" && rest == channelSuffix && (lease == nil || c.args[7] == lease)
}

// answerJoined hands each release folded into c its own answer.
func (n *node) answerJoined(c *call, val any, err error) {
	vals, ok := val.([]any)
	if err == nil && (!ok || len(vals) != len(c.joined)) {
		err = fmt.Errorf("release of %d keys answered %T of %d", len(c.joined), val, len(vals))
	}
	for i, j := range c.joined {
		if err != nil {
			n.answer(j, nil, err)
			continue
		}
		n.answer(j, vals[i], nil)
	}
}

// joinsReleases is whether a node on client cl may fold releases: a
// standalone (or sentinel-managed) server holds all of their keys.
func joinsReleases(cl redis.UniversalClient) bool {
	_, ok := cl.(*redis.Client)
	return ok
}
