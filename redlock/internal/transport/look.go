package transport

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// nodeMillis reads the node's clock (TIME) as Unix ms; 0 when it failed.
func (n *Node) nodeMillis() int64 {
	cmd := redis.NewCmd(context.Background(), "time")
	n.Do(context.Background(), []*redis.Cmd{cmd})
	v, err := cmd.Int64Slice()
	if err != nil || len(v) != 2 {
		return 0
	}
	return v[0]*1000 + v[1]/1000
}

// readLooks sets the seen of each call of live whose look-up found a record
// within its window by the node's clock, read once. A look-up failing where
// its call did not is reported as the node's failure, and finds nothing.
func (n *Node) readLooks(live []*Call, calls, looks []*redis.Cmd) {
	now, i := int64(-1), 0 // the node's clock, read at the first score found
	for j, c := range live {
		if c.Look == nil {
			continue
		}
		look := looks[i]
		i++
		switch err := look.Err(); {
		case err == nil:
			score, expiry, ok := n.env.LookScore(look.Val())
			if ok && now < 0 {
				now = n.nodeMillis()
			}
			if ok && now > 0 && expiry > now {
				c.seen = score
			}
		case err != redis.Nil && n.Failed != nil && (calls[j].Err() == nil || calls[j].Err() == redis.Nil):
			n.Failed("look", c.Resource, c.Node, nodeErr(err))
		}
	}
}
