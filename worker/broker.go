package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hibiken/asynq"
)

// parseBroker turns ASYNQ_REDIS_URL into asynq's connection options, for a
// single Redis, a Sentinel-managed master or a Redis Cluster. Errors never
// quote the password.
func parseBroker(raw string) (asynq.RedisConnOpt, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		// The parser's message may quote part of the password.
		return nil, errors.New("cannot be parsed (percent-encode special characters in the user and password)")
	}
	shown := u.Redacted()
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host", shown)
	}
	switch u.Scheme {
	case "redis", "rediss", "redis-sentinel":
		opt, err := asynq.ParseRedisURI(u.String())
		if err != nil {
			msg := err.Error()
			if p, ok := u.User.Password(); ok && p != "" {
				msg = strings.ReplaceAll(msg, p, "xxxxx")
			}
			return nil, fmt.Errorf("%q: %s", shown, msg)
		}
		if s, ok := opt.(asynq.RedisFailoverClientOpt); ok && s.MasterName == "" {
			return nil, fmt.Errorf("%q: a sentinel URL needs ?master=<name>", shown)
		}
		return opt, nil
	case "redis-cluster", "rediss-cluster":
		opt := asynq.RedisClusterClientOpt{Addrs: strings.Split(u.Host, ",")}
		for _, a := range opt.Addrs {
			if a == "" || !strings.Contains(a, ":") {
				return nil, fmt.Errorf("%q: cluster address %q must be host:port", shown, a)
			}
		}
		if u.User != nil {
			opt.Username = u.User.Username()
			opt.Password, _ = u.User.Password()
		}
		if u.Scheme == "rediss-cluster" {
			host, _, _ := strings.Cut(opt.Addrs[0], ":")
			opt.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
		return opt, nil
	}
	return nil, fmt.Errorf("%q: scheme must be redis, rediss, redis-sentinel, redis-cluster or rediss-cluster, got %q", shown, u.Scheme)
}
