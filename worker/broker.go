package worker

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/asynqlock/asynqlock/redisurl"
	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// broker is a parsed ASYNQ_REDIS_URL.
type broker struct {
	opt  asynq.RedisConnOpt
	addr string // where it is, for logs: never credentials
}

// parseBroker turns ASYNQ_REDIS_URL into asynq's connection options, for a
// single Redis, a Sentinel-managed master or a Redis Cluster. asynq's own
// URI parser is not used: it drops the ACL user name, sends a Sentinel URL's
// password to the sentinels only and ignores its db. Errors never quote the
// password.
func parseBroker(raw string, files workerconfig.TLSFiles) (broker, error) {
	u, err := redisurl.Parse(workerconfig.WithTLSDefaults(raw, files))
	if err != nil {
		return broker{}, err
	}
	switch u.Scheme {
	case "redis", "rediss":
		return singleBroker(u)
	case "redis-sentinel":
		return sentinelBroker(u)
	case "redis-cluster", "rediss-cluster":
		return clusterBroker(u)
	}
	return broker{}, fmt.Errorf("URL %q: scheme must be redis, rediss, redis-sentinel, redis-cluster or rediss-cluster, got %q",
		redisurl.Redact(u), u.Scheme)
}

// singleBroker reads a redis:// or rediss:// URL with go-redis's parser (user
// name, TLS files and go-redis parameters included).
func singleBroker(u *url.URL) (broker, error) {
	o, err := redisurl.ParseNode(u.String())
	if err != nil {
		return broker{}, err
	}
	return broker{addr: o.Addr, opt: asynq.RedisClientOpt{
		Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolSize: o.PoolSize, TLSConfig: o.TLSConfig,
	}}, nil
}

// sentinelBroker reads redis-sentinel://[user:pw@]h1:p,h2:p[/db]?master=name
// [&db=N][&username=u][&password=p]: the user info authenticates to the
// sentinels, username and password to the master (go-redis's convention).
func sentinelBroker(u *url.URL) (broker, error) {
	shown := redisurl.Redact(u)
	q := u.Query()
	opt := asynq.RedisFailoverClientOpt{
		MasterName:    q.Get("master"),
		SentinelAddrs: strings.Split(u.Host, ","),
		Username:      q.Get("username"),
		Password:      q.Get("password"),
	}
	if u.User != nil {
		opt.SentinelUsername = u.User.Username()
		opt.SentinelPassword, _ = u.User.Password()
	}
	if opt.MasterName == "" {
		return broker{}, fmt.Errorf("URL %q: a sentinel URL needs ?master=<name>", shown)
	}
	if err := hostPorts(opt.SentinelAddrs); err != nil {
		return broker{}, fmt.Errorf("URL %q: %w", shown, err)
	}
	db, err := urlDB(u)
	if err != nil {
		return broker{}, fmt.Errorf("URL %q: %w", shown, err)
	}
	opt.DB = db
	if err := onlyParams(q, "master", "db", "username", "password"); err != nil {
		return broker{}, fmt.Errorf("URL %q: %w", shown, err)
	}
	return broker{opt: opt, addr: fmt.Sprintf("master %q via sentinels %s", opt.MasterName, u.Host)}, nil
}

// clusterBroker reads redis-cluster://[user:pw@]h1:p,h2:p (rediss-cluster
// for TLS, with the TLS file parameters).
func clusterBroker(u *url.URL) (broker, error) {
	shown := redisurl.Redact(u)
	opt := asynq.RedisClusterClientOpt{Addrs: strings.Split(u.Host, ",")}
	if err := hostPorts(opt.Addrs); err != nil {
		return broker{}, fmt.Errorf("URL %q: %w", shown, err)
	}
	if u.User != nil {
		opt.Username = u.User.Username()
		opt.Password, _ = u.User.Password()
	}
	q := u.Query()
	if err := onlyParams(q, redisurl.ParamTLSCAFile, redisurl.ParamTLSCertFile, redisurl.ParamTLSKeyFile); err != nil {
		return broker{}, fmt.Errorf("URL %q: %w", shown, err)
	}
	if u.Scheme == "rediss-cluster" {
		host, _, _ := net.SplitHostPort(opt.Addrs[0])
		opt.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		err := redisurl.AddTLSFiles(opt.TLSConfig, q.Get(redisurl.ParamTLSCAFile), q.Get(redisurl.ParamTLSCertFile), q.Get(redisurl.ParamTLSKeyFile))
		if err != nil {
			return broker{}, fmt.Errorf("URL %q: %w", shown, err)
		}
	} else if len(q) > 0 {
		return broker{}, fmt.Errorf("URL %q: TLS parameters need the rediss-cluster:// scheme", shown)
	}
	return broker{opt: opt, addr: "cluster " + u.Host}, nil
}

// hostPorts checks that every address is host:port.
func hostPorts(addrs []string) error {
	for _, a := range addrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return fmt.Errorf("address %q must be host:port", a)
		}
	}
	return nil
}

// urlDB is the database of a sentinel URL: its path or its db parameter.
func urlDB(u *url.URL) (int, error) {
	path, param := strings.Trim(u.Path, "/"), u.Query().Get("db")
	if path != "" && param != "" && path != param {
		return 0, fmt.Errorf("database given twice: /%s and db=%s", path, param)
	}
	s := path + param
	if path != "" && param != "" {
		s = path
	}
	if s == "" {
		return 0, nil
	}
	db, err := strconv.Atoi(s)
	if err != nil || db < 0 {
		return 0, fmt.Errorf("database %q is not a non-negative number", s)
	}
	return db, nil
}

// onlyParams refuses query parameters other than the allowed ones, so that a
// misspelt one is not silently ignored.
func onlyParams(q url.Values, allowed ...string) error {
	for k := range q {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("unknown parameter %q; allowed: %s", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// probeClient is the readiness probe's client to the broker: one dial
// attempt, no command retries and the probe's deadline on the socket, so that
// a probe reports the cause (connection refused, WRONGPASS, a certificate)
// rather than running out of time retrying.
func probeClient(opt asynq.RedisConnOpt) redis.UniversalClient {
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		return redis.NewClient(&redis.Options{
			Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig,
			DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2,
		})
	case asynq.RedisFailoverClientOpt:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: o.MasterName, SentinelAddrs: o.SentinelAddrs,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig,
			DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2,
		})
	case asynq.RedisClusterClientOpt:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
			DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2,
		})
	}
	return opt.MakeRedisClient().(redis.UniversalClient)
}
