package transport

import (
	"fmt"
	"slices"
	"strings"
)

// releaseArgc is the length of an Env.Release call (lua/queue_release.lua):
// evalsha, sha, numkeys, three keys, three arguments; a record adds three.
const (
	releaseArgc         = 9
	recordedReleaseArgc = releaseArgc + 3
)

// releaseParts reads an Env.Release call: its keys, its token, lease and
// channel, and its record's set and arguments (or nil).
func releaseParts(c *Call) (keys, argv []any, recKey any, recArgs []any) {
	a := c.Args
	if len(a) == releaseArgc {
		return a[3:6], a[6:9], nil, nil
	}
	return a[3:6], a[7:10], a[6], a[10:12]
}

// joinReleases folds a batch's releases into one Env.ReleaseMany call where
// the last of them stands: a release only moves later, past calls on other
// resources. Single servers only: a cluster's keys may be on other shards.
func (n *Node) joinReleases(live []*Call) []*Call {
	if !n.single || n.env.Release == nil || len(live) < 2 || len(live) > maxBatch {
		return live
	}
	var join [maxBatch]bool
	named := make([]string, 0, maxBatch) // of the other calls between a release and last
	last, count := -1, 0
	var lease any
	for i := len(live) - 1; i >= 0; i-- {
		c := live[i]
		switch {
		case !n.joinable(c, lease):
			if last >= 0 {
				named = append(named, c.Resource)
			}
		case !slices.Contains(named, c.Resource):
			if last < 0 {
				_, argv, _, _ := releaseParts(c)
				last, lease = i, argv[1]
			}
			join[i], count = true, count+1
		}
	}
	if count < 2 {
		return live
	}
	return n.foldReleases(live, join[:len(live)], last, lease)
}

// foldReleases replaces the releases marked in join by one call at last,
// laid out as lua/release_many.lua reads it.
func (n *Node) foldReleases(live []*Call, join []bool, last int, lease any) []*Call {
	all := &n.fold // the worker's: one fold per batch
	*all = Call{Node: n.Idx, Script: n.env.ReleaseMany, Op: "release", joined: all.joined[:0]}
	keys, argv, flags := n.foldKeys[:0], n.foldArgv[:0], n.foldFlags[:0]
	out := live[:0]
	for i, c := range live {
		if !join[i] {
			out = append(out, c)
			continue
		}
		ks, av, recKey, recArgs := releaseParts(c)
		keys, argv = append(keys, ks...), append(argv, av[0]) // its keys and token
		flag := byte('-')
		if recArgs != nil {
			flag, keys, argv = 'r', append(keys, recKey), append(argv, recArgs...)
		}
		flags = append(flags, flag)
		all.joined = append(all.joined, c)
		if i == last {
			out = append(out, all)
		}
	}
	a := append(n.foldArgs[:0], "evalsha", n.env.ReleaseMany.SHA, len(keys))
	all.Args = append(append(append(a, keys...), lease, string(flags)), argv...)
	n.foldArgs, n.foldKeys, n.foldArgv, n.foldFlags = all.Args, keys, argv, flags
	return out
}

// joinable is whether c is a queue release announced on its key's channel,
// with the others' lease (nil for the first).
func (n *Node) joinable(c *Call, lease any) bool {
	if c.Script != n.env.Release || len(c.Args) != releaseArgc && len(c.Args) != recordedReleaseArgc {
		return false
	}
	ks, argv, _, _ := releaseParts(c)
	key, _ := ks[0].(string)
	ch, _ := argv[2].(string)
	rest, ok := strings.CutPrefix(ch, key)
	return ok && key != "" && rest == n.env.ChannelSuffix && (lease == nil || argv[1] == lease)
}

// answerJoined hands each release folded into c its own answer.
func (n *Node) answerJoined(c *Call, val any, err error) {
	vals, ok := val.([]any)
	if err == nil && (!ok || len(vals) != len(c.joined)) {
		err = fmt.Errorf("release of %d keys answered %T of %d", len(c.joined), val, len(vals))
	}
	for i, j := range c.joined {
		var v any
		if err == nil {
			v = vals[i]
		}
		n.answer(j, v, err)
	}
}
