package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/sameserver"
	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/redis/go-redis/v9"
)

// checkClient lists the settings of a caller's *redis.Client that make a
// dead or stuck node cost far more than the node timeout (New then makes a
// client of its own, see fitForLocking): each node's calls
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

// fitForLocking returns a client of the lock's own for a caller's
// *redis.Client whose settings checkClient finds unfit, made from a copy of
// its options with tuneForLocking's settings, whose commands pass through
// the hooks added to cl (userHooks); nil when cl is fit, or of another kind,
// and is used as given.
func fitForLocking(cl redis.UniversalClient, nodeTimeout time.Duration) redis.UniversalClient {
	if len(checkClient(cl)) == 0 {
		return nil
	}
	o := *cl.(*redis.Client).Options() // filled in by go-redis: reset what tuneForLocking decides
	io := ioTimeout(nodeTimeout)
	for _, d := range []*time.Duration{&o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d < 0 || *d > io {
			*d = 0
		}
	}
	o.DialerRetries, o.Protocol = 0, 0
	// The caller's client registered its handlers with these; the lock's
	// client has no use for push notifications (RESP2, see tuneForLocking).
	o.PushNotificationProcessor, o.MaintNotificationsConfig = nil, nil
	if isDefaultDialer(o.Dialer) {
		o.Dialer = nil // go-redis's own, bound to the caller's dial timeout: a new one is made
	}
	tuneForLocking(&o, nodeTimeout)
	own := redis.NewClient(&o)
	own.AddHook(withUserHooks(cl.(*redis.Client)))
	return own
}

// isDefaultDialer reports whether d is the dialer go-redis gives a client
// that has none (NewDialer's closure, bound to that client's options), by
// its function's name: inlining gives each call site of NewDialer a closure
// of its own, so the code pointer cannot tell. TestDefaultDialerIsRecognised
// keeps this true across go-redis versions.
func isDefaultDialer(d func(context.Context, string, string) (net.Conn, error)) bool {
	if d == nil {
		return false
	}
	fn := runtime.FuncForPC(reflect.ValueOf(d).Pointer())
	return fn != nil && strings.HasPrefix(fn.Name(), "github.com/redis/go-redis/v9.") && strings.Contains(fn.Name(), "NewDialer.func")
}

// errMisconfigured marks a lock node that refuses this client for a reason
// that retrying will not fix (NodeReport.Misconfigured): NewFromURLs refuses
// such a node at once (ErrInvalid) rather than counting it as down.
var errMisconfigured = fmt.Errorf("%w: lock node misconfigured", ErrInvalid)

// permanentErrors are the error replies that no retry cures, by prefix,
// with what to change; script says whether the error came from the lock's
// own commands (unknown commands and ACL denials count only there: a node
// may refuse TIME and still hold locks).
var permanentErrors = []struct {
	prefix, fix string
	script      bool
}{
	{"WRONGPASS", "wrong user name or password: correct them in the node's URL", false},
	{"NOAUTH", "the node needs a password and none is given: add user:password@ to the node's URL", false},
	{"ERR AUTH", "a password is given but the node has none configured: remove it from the node's URL", false},
	{"ERR Client sent AUTH", "a password is given but the node has none configured: remove it from the node's URL", false},
	{"NOPERM", "the ACL user may not run the lock's commands on its keys: grant +@scripting +set +get +del +publish and the key prefix (~prefix*) and channels (&prefix*)", true},
	{"ERR unknown command", "the node does not know a command the lock needs (renamed or disabled?): EVALSHA, EVAL, SET, GET, DEL and PUBLISH must be available", true},
}

// misconfigured classifies a node's error reply: an error matching
// ErrInvalid that says what to change, or nil when err is nil or may
// pass (a timeout, a refused connection, a node loading its data).
func misconfigured(err error, script bool) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, p := range permanentErrors {
		if strings.HasPrefix(msg, p.prefix) && (script || !p.script) {
			return fmt.Errorf("%w: %s (%v)", errMisconfigured, p.fix, err)
		}
	}
	return nil
}

// probeScript runs the release script on a key nobody holds (it changes
// nothing): an ACL or a renamed command that would refuse every lock shows
// here rather than as a node that never grants one.
func probeScript(ctx context.Context, cl redis.UniversalClient, prefix string) error {
	key := []string{prefix + "{asynqlock:check}"}
	err := cl.EvalSha(ctx, releaseScript.sha, key, "no token is this", "").Err()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		err = cl.Eval(ctx, releaseScript.src, key, "no token is this", "").Err()
	}
	return err
}

// markSameServer sets the SameServer of every report whose node reaches the
// server of another.
func markSameServer(reports []NodeReport) {
	ids := make([][]string, len(reports))
	for i, r := range reports {
		ids[i] = runIDs(r)
	}
	for _, g := range sameserver.Find(ids) {
		for _, i := range g {
			for _, j := range g {
				if j != i && !slices.Contains(reports[i].SameServer, j) {
					reports[i].SameServer = append(reports[i].SameServer, j)
				}
			}
			slices.Sort(reports[i].SameServer)
		}
	}
}

// runIDs are the server identities of a node that answered Check: its
// run_id, or each shard's of a Redis Cluster, so that two lock nodes
// sharing any one server are caught.
func runIDs(r NodeReport) []string {
	if r.Shards == nil {
		if r.Err != nil || r.RunID == "" {
			return nil
		}
		return []string{r.RunID}
	}
	var ids []string
	for _, s := range r.Shards {
		if s.Err == nil && s.RunID != "" {
			ids = append(ids, s.RunID)
		}
	}
	return ids
}

// firstContact checks the nodes of a new client as NewFromURLs does: every
// node that answers within a few node timeouts is asked who it is and
// whether it accepts the lock's commands; names are the nodes as errors may
// show them (URLs with passwords masked). It returns an error matching
// ErrInvalid for what no retry cures (one server
// reached twice among them);
// a node that does not answer is left to the lock's own calls (it may be
// down for now).
func (c *Client) firstContact(names []string) error {
	reports, err := c.check(context.Background())
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range reports {
		if r.Misconfigured != nil {
			errs = append(errs, fmt.Errorf("node %d (%s): %w", r.Node, names[r.Node], r.Misconfigured))
		} else if r.Err == nil {
			if err := c.passwordUnused(r.Node); err != nil {
				errs = append(errs, fmt.Errorf("node %d (%s): %w", r.Node, names[r.Node], err))
			}
		}
	}
	for _, r := range reports {
		if len(r.SameServer) > 0 && r.SameServer[0] < r.Node {
			first := r.SameServer[0]
			errs = append(errs, fmt.Errorf("node %d (%s): %w: it reaches the server of node %d (%s), same run_id: "+
				"one server casts one vote; give each lock node its own redis-server", r.Node, names[r.Node], errMisconfigured, first, names[first]))
		}
	}
	return errors.Join(errs...) // each matches ErrInvalid
}

// passwordUnused tells a password given for node i that the node does not
// have (redisurl.UnusedPassword), as misconfigured does the other errors
// no retry cures.
func (c *Client) passwordUnused(i int) error {
	var user, pw string
	switch cl := c.nodes[i].client.(type) {
	case *redis.Client:
		user, pw = cl.Options().Username, cl.Options().Password
	case *redis.ClusterClient:
		user, pw = cl.Options().Username, cl.Options().Password
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.warmWait())
	defer cancel()
	return misconfigured(redisurl.UnusedPassword(ctx, c.nodes[i].client, user, pw), false)
}
