package redlock

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// checkClient lists the settings of a caller's *redis.Client that make a
// dead or stuck node cost far more than the node timeout: each node's calls
// run one batch at a time, so whatever one call to a dead node costs, every
// call queued behind it waits too. Options are read after go-redis filled in
// its defaults. Clients of other kinds are not checked.
func checkClient(cl redis.UniversalClient) []string {
	rc, ok := cl.(*redis.Client)
	if !ok {
		return nil
	}
	o := rc.Options()
	var bad []string
	if o.MaxRetries > 0 {
		bad = append(bad, fmt.Sprintf("MaxRetries is %d (go-redis's default is 3): set MaxRetries: -1, or each failed call is retried with backoff before the next one is sent", o.MaxRetries))
	}
	if o.DialerRetries > 1 {
		bad = append(bad, fmt.Sprintf("DialerRetries is %d (go-redis's default is 5): set DialerRetries: 1, or every call to a dead node dials it %d times", o.DialerRetries, o.DialerRetries))
	}
	if o.ReadTimeout <= 0 || o.WriteTimeout <= 0 {
		bad = append(bad, "ReadTimeout or WriteTimeout is disabled: set both to a few node timeouts, or a stuck node holds its calls forever")
	}
	return bad
}

// checkClients refuses clients given to New whose settings would let one
// dead node stall its calls (see checkClient), naming every problem at once.
func checkClients(nodes []redis.UniversalClient) error {
	var msgs []string
	for i, cl := range nodes {
		if cl == nil {
			continue // reported by newClient
		}
		for _, m := range checkClient(cl) {
			msgs = append(msgs, fmt.Sprintf("node %d (%s): %s", i, nodeAddr(i, cl), m))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return invalidf("client settings unfit for a lock node (NewFromURLs sets them for you): %s", strings.Join(msgs, "; "))
}
