package transport

import (
	"fmt"
	"slices"
	"strings"
)

// releaseArgc is the length of an Env.Release call's arguments (redlock's
// queue release, lua/queue_release.lua):
// evalsha, sha, numkeys, three keys, three arguments; recordedReleaseArgc
// with a completion record (recordedArgs): its set, and its id and window.
const (
	releaseArgc         = 9
	recordedReleaseArgc = releaseArgc + 3
)

// releaseParts reads an Env.Release call's arguments: its three
// keys, its token, lease and channel, and its record's set and arguments
// (nil without a record).
func releaseParts(c *Call) (keys, argv []any, recKey any, recArgs []any) {
	a := c.Args
	if len(a) == releaseArgc {
		return a[3:6], a[6:9], nil, nil
	}
	return a[3:6], a[7:10], a[6], a[10:12]
}

// joinReleases folds a batch's releases into one Env.ReleaseMany call,
// sent where the last of them stands. A release only moves later, and only
// past calls on other resources (docs/design/BATCHING.md). Single servers
// only: a cluster node's keys may live on different shards.
func (n *Node) joinReleases(live []*Call) []*Call {
	if !n.single || n.env.Release == nil || len(live) > maxBatch {
		return live
	}
	last, count := -1, 0
	var lease any
	for i, c := range live {
		if n.joinable(c, lease) {
			_, argv, _, _ := releaseParts(c)
			last, count, lease = i, count+1, argv[1]
		}
	}
	if count < 2 {
		return live
	}
	var join [maxBatch]bool
	named := make([]string, 0, maxBatch) // of the other calls after the one at hand, up to last
	count, records := 0, 0
	for i := last; i >= 0; i-- {
		c := live[i]
		switch {
		case !n.joinable(c, lease):
			named = append(named, c.Resource)
		case !slices.Contains(named, c.Resource):
			join[i], count = true, count+1
			if len(c.Args) == recordedReleaseArgc {
				records++
			}
		}
	}
	if count < 2 {
		return live
	}
	return n.foldReleases(live, join[:len(live)], last, count, records)
}

// foldReleases replaces the count releases marked in join (records of them
// with a record) by one call at last, laid out as lua/release_many.lua reads
// it.
func (n *Node) foldReleases(live []*Call, join []bool, last, count, records int) []*Call {
	all := &n.fold // the worker's: one fold per batch
	*all = Call{Node: n.Idx, Script: n.env.ReleaseMany, Op: "release", joined: all.joined[:0]}
	nkeys := 3*count + records
	need := 3 + nkeys + 2 + count + 2*records
	n.foldArgs = slices.Grow(n.foldArgs[:0], need)[:need]
	all.Args = n.foldArgs
	all.Args[0], all.Args[1], all.Args[2] = "evalsha", n.env.ReleaseMany.SHA, nkeys
	keys, argv := all.Args[3:3+nkeys], all.Args[3+nkeys:]
	var flags [maxBatch]byte
	k, a := 0, 2
	out := live[:0]
	for i, c := range live {
		if !join[i] {
			out = append(out, c)
			continue
		}
		ks, av, recKey, recArgs := releaseParts(c)
		k += copy(keys[k:], ks)
		argv[0], argv[a] = av[1], av[0] // the lease, the same for all; the token
		a++
		flags[len(all.joined)] = '-'
		if recArgs != nil {
			flags[len(all.joined)] = 'r'
			keys[k] = recKey
			k++
			a += copy(argv[a:], recArgs)
		}
		all.joined = append(all.joined, c)
		if i == last {
			out = append(out, all)
		}
	}
	argv[1] = flagString(flags[:count], records)
	return out
}

// plainFlags and recordFlags are release_many's flags of batches whose
// releases all write no record, or all write one: no string built for
// them.
var (
	plainFlags  = strings.Repeat("-", maxBatch)
	recordFlags = strings.Repeat("r", maxBatch)
)

// flagString is flags as a string, of which records are 'r'.
func flagString(flags []byte, records int) string {
	switch records {
	case 0:
		return plainFlags[:len(flags)]
	case len(flags):
		return recordFlags[:len(flags)]
	}
	return string(flags)
}

// joinable is whether c is a queue release that may share a call: one
// that announces on its key's channel, with the lease of the others (nil
// for the first).
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
