package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// URL is the plain address as a redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// refuser is the ACL user that Refuse creates to lift the refusal again.
const refuser, refuserPassword = "redistest-refuser", "redistest-refuser-pw"

// Refuse makes the server refuse every command of its default user with a
// NOPERM error (an outage that still answers, naming its cause), until
// Refuse(false). The default user's connections stay open.
func (s *Server) Refuse(refuse bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := ClientOptions(s.Addr())
	// A control call of the test, not a node under test: generous timeouts
	// (a loaded machine once took more than the clients' dial timeout).
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.MaxRetries = 10*time.Second, 10*time.Second, 10*time.Second, 3
	cmds := [][]any{{"acl", "setuser", refuser, "on", ">" + refuserPassword, "~*", "&*", "+@all"},
		{"acl", "setuser", "default", "-@all"}}
	if !refuse {
		opts.Username, opts.Password = refuser, refuserPassword
		cmds = [][]any{{"acl", "setuser", "default", "+@all"}}
	}
	c := redis.NewClient(opts)
	defer c.Close()
	for _, cmd := range cmds {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			return fmt.Errorf("redistest: refuse %v: %w", refuse, err)
		}
	}
	return nil
}

// Servers starts n plain redis-servers for Example functions, which have no
// testing.TB to stop them or to skip: it returns their redis:// URLs and a
// function that kills them all and removes their files. On error none is
// left running; when redis-server is missing the error says how to get it.
func Servers(n int) (urls []string, stop func(), err error) {
	bin, err := lookupServer()
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: redis-server not found: %w; install it with `apt-get install redis-server` "+
			"(./scripts/test does) or set %s to its path", err, ServerEnv)
	}
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		return nil, nil, err
	}
	var procs []*process
	stop = func() {
		for _, p := range procs {
			_ = p.kill()
		}
		_ = os.RemoveAll(dir)
	}
	for range n {
		var errs []error
		for range portAttempts {
			s, err := serverSetup{}.start(bin, dir)
			if err == nil {
				procs, urls = append(procs, s.proc), append(urls, s.URL())
				break
			}
			errs = append(errs, err)
		}
		if len(errs) == portAttempts {
			stop()
			return nil, nil, fmt.Errorf("redistest: start server: %w", errors.Join(errs...))
		}
	}
	return urls, stop, nil
}
