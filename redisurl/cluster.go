package redisurl

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Cluster URL schemes of a lock node that is a whole Redis Cluster.
const (
	schemeCluster    = "redis-cluster"
	schemeClusterTLS = "rediss-cluster"
)

// isCluster reports whether raw is a redis-cluster:// or rediss-cluster://
// URL, the form of a lock node that is a whole Redis Cluster.
func isCluster(raw string) bool {
	scheme, _, _ := strings.Cut(strings.TrimSpace(raw), "://")
	return scheme == schemeCluster || scheme == schemeClusterTLS
}

// parseClusterNode parses redis-cluster://[user:pw@]host:port (or
// rediss-cluster:// for TLS, with the TLS file parameters): ONE lock node
// that is a Redis Cluster, reached through the seed host:port and further
// seeds written as go-redis's cluster URLs write them (?addr=h2:p2&addr=h3:p3)
// rather than with commas, since the comma separates lock nodes. Errors show
// the URL redacted.
func parseClusterNode(raw string) (*redis.ClusterOptions, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	shown := Redact(u)
	if u.Scheme != schemeCluster && u.Scheme != schemeClusterTLS {
		return nil, fmt.Errorf("URL %q: scheme must be redis-cluster:// or rediss-cluster:// for a Redis Cluster, got %q", shown, u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("URL %q: give a cluster's further seeds as ?addr=host:port parameters; a comma separates lock nodes", shown)
	}
	if strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("URL %q: a Redis Cluster has only database 0; remove the path", shown)
	}
	files := takeTLSFiles(u)
	u.Scheme = strings.TrimSuffix(u.Scheme, "-cluster") // go-redis's cluster URLs say redis:// or rediss://
	o, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, goRedisError(u, shown, err)
	}
	if err := files.apply(o.TLSConfig, shown, "rediss-cluster://"); err != nil {
		return nil, err
	}
	return o, nil
}

// ParseLockNode parses a lock node URL of either form: a single server
// (redis://, rediss://; see ParseNode) returned as single, or a Redis
// Cluster returned as cluster: redis-cluster://[user:pw@]host:port
// (rediss-cluster:// for TLS, with the TLS file parameters), further seeds
// as ?addr=host:port parameters, since a comma separates lock nodes.
// Exactly one of the two is set when err is nil.
func ParseLockNode(raw string) (single *redis.Options, cluster *redis.ClusterOptions, err error) {
	if isCluster(raw) {
		cluster, err = parseClusterNode(raw)
		return nil, cluster, err
	}
	single, err = ParseNode(raw)
	if err != nil && strings.Contains(err.Error(), "scheme must be") {
		err = fmt.Errorf("%w (or redis-cluster:// or rediss-cluster:// for a Redis Cluster)", err)
	}
	return single, nil, err
}
