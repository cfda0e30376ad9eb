package redisurl

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// UnusedPassword returns the server's answer when cl was given a password
// (pw, for user) that the server does not have, nil otherwise. go-redis
// authenticates with HELLO ... AUTH default <password>, which a server
// without a password accepts whatever the password, so a URL naming the
// wrong server would pass unnoticed. The one-argument AUTH <password> tells:
// such a server answers "ERR AUTH <password> called without any password
// configured for the default user" (the text quotes no password), one with
// a password OK. Only the default user is checked: a user name means ACL
// authentication. A server that does not answer in time gives nil: it is
// left to the caller's probes.
func UnusedPassword(ctx context.Context, cl redis.UniversalClient, user, pw string) error {
	if pw == "" || (user != "" && user != "default") {
		return nil
	}
	err := cl.Do(ctx, "auth", pw).Err()
	if err != nil && strings.HasPrefix(err.Error(), "ERR AUTH") {
		return err
	}
	return nil
}
