package integration

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Every broker and lock-node URL form the README documents, on real
// servers: tasks flow through the worker under their locks.

func TestOpsACLUsersOnBrokerAndLockNodes(t *testing.T) {
	const brokerPW, lockPW = "broker-Secret-1", "lock-Secret-2"
	broker := redistest.StartServer(t, redistest.WithUser("app", brokerPW), redistest.WithoutDefaultUser())
	var nodes []string
	for range 3 {
		s := redistest.StartServer(t, redistest.WithUser("locker", lockPW), redistest.WithoutDefaultUser())
		nodes = append(nodes, "redis://locker:"+lockPW+"@"+s.Addr())
	}
	brokerURL := "redis://app:" + brokerPW + "@" + broker.Addr() + "/2"

	// Control: asynq's own URI parser drops the user name, so the same URL
	// cannot reach this broker through it.
	opt, err := asynq.ParseRedisURI(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := opt.MakeRedisClient().(redis.UniversalClient)
	if err := rc.Ping(context.Background()).Err(); err == nil {
		t.Fatal("control: asynq's parser reached an ACL user; the test proves nothing")
	}
	_ = rc.Close()

	o := newOpsWorker(t, opsVars(brokerURL, nodes, nil))
	o.run(t)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	o.roundTrip(t, "acl")
	c := redis.NewClient(&redis.Options{Addr: broker.Addr(), Username: "app", Password: brokerPW, DB: 2})
	defer c.Close()
	if n, err := c.Exists(context.Background(), "asynq:queues").Result(); err != nil || n != 1 {
		t.Fatalf("asynq's keys are not in db 2: %d, %v", n, err)
	}
	noSecret(t, "the log", o.logs.String(), brokerPW, lockPW)
}

// TestOpsWrongNodePasswordIsRefusedAndNamed: a wrong password is a
// configuration error, not an outage (issue 25): the worker is refused at
// New, naming the node by its masked URL and WRONGPASS, never a password.
func TestOpsWrongNodePasswordIsRefusedAndNamed(t *testing.T) {
	const lockPW, wrongPW = "lock-Secret-2", "wrong-Secret-3"
	var nodes, addrs []string
	for i := range 3 {
		s := redistest.StartServer(t, redistest.WithUser("locker", lockPW), redistest.WithoutDefaultUser())
		pw := lockPW
		if i == 2 {
			pw = wrongPW
		}
		nodes = append(nodes, "redis://locker:"+pw+"@"+s.Addr())
		addrs = append(addrs, s.Addr())
	}
	broker := redistest.StartNode(t)
	cfg, err := worker.LoadConfigFrom(opsVars(broker.URL(), nodes, nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = worker.New(cfg, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if !errors.Is(err, redlock.ErrInvalid) || !errors.Is(err, worker.ErrConfig) {
		t.Fatalf("New = %v, want ErrInvalid and ErrConfig", err)
	}
	for _, want := range []string{"REDLOCK_NODES", "node 2 (redis://locker:xxxxx@" + addrs[2] + ")", "WRONGPASS"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	noSecret(t, "the error", err.Error(), lockPW, wrongPW)
}

func TestOpsTLSWithPrivateCAAndClientCertificates(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	broker := redistest.StartServer(t, redistest.WithTLS(files, true))
	var servers []*redistest.Server
	for range 3 {
		servers = append(servers, redistest.StartServer(t, redistest.WithTLS(files, true)))
	}
	// Node 0 names its files in the URL; the others get them from the
	// environment.
	nodes := []string{"rediss://" + servers[0].TLSAddr() + "?tls_ca_file=" + files.CA +
		"&tls_cert_file=" + files.ClientCert + "&tls_key_file=" + files.ClientKey}
	for _, s := range servers[1:] {
		nodes = append(nodes, "rediss://"+s.TLSAddr())
	}
	tlsEnv := map[string]string{
		"ASYNQ_TLS_CA_FILE": files.CA, "ASYNQ_TLS_CERT_FILE": files.ClientCert, "ASYNQ_TLS_KEY_FILE": files.ClientKey,
		"REDLOCK_TLS_CA_FILE": files.CA, "REDLOCK_TLS_CERT_FILE": files.ClientCert, "REDLOCK_TLS_KEY_FILE": files.ClientKey,
	}
	o := newOpsWorker(t, opsVars("rediss://"+broker.TLSAddr(), nodes, tlsEnv))
	o.run(t)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	o.roundTrip(t, "tls")

	// Without the CA the two nodes that rely on the environment refuse the
	// server's certificate, and the operator is told so.
	delete(tlsEnv, "REDLOCK_TLS_CA_FILE")
	bad := newOpsWorker(t, opsVars("rediss://"+broker.TLSAddr(), nodes, tlsEnv))
	bad.run(t)
	bad.waitRecord(t, "WARN", "lock node unreachable", map[string]string{"addr": servers[1].TLSAddr(), "err": "certificate"}, 30*time.Second)
	bad.waitReadyzBody(t, 503, 30*time.Second, "lock quorum lost", "1 of 3 lock nodes up", servers[2].TLSAddr(), "certificate")
}

func TestOpsSentinelWithSeparatePasswordsAndDB(t *testing.T) {
	const masterPW, sentinelPW = "master-Secret-4", "sentinel-Secret-5"
	master := redistest.StartServer(t, redistest.WithPassword(masterPW))
	sentinel := redistest.StartSentinel(t, "mymaster", master.Addr(), masterPW, sentinelPW)
	url := "redis-sentinel://:" + sentinelPW + "@" + sentinel + "/3?master=mymaster&password=" + masterPW

	// Control: asynq's own parser sends the one password to the sentinel
	// and ignores the database.
	opt, err := asynq.ParseRedisURI(url)
	if fo, ok := opt.(asynq.RedisFailoverClientOpt); err != nil || !ok || fo.Password != "" || fo.DB != 0 {
		t.Fatalf("control: asynq's parser now keeps the master password and db (%+v, %v)", opt, err)
	}

	o := newOpsWorker(t, opsVars(url, redistest.StartCluster(t, 3).URLs(), nil))
	o.run(t)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	o.roundTrip(t, "sentinel")
	ctx := context.Background()
	for db, want := range map[int]int64{3: 1, 0: 0} {
		c := redis.NewClient(&redis.Options{Addr: master.Addr(), Password: masterPW, DB: db})
		n, err := c.Exists(ctx, "asynq:queues").Result()
		_ = c.Close()
		if err != nil || n != want {
			t.Fatalf("asynq:queues in db %d: %d, %v; want %d", db, n, err, want)
		}
	}
	// go-redis's own lines reach the same JSON stream.
	o.waitRecord(t, "INFO", "sentinel:", map[string]string{"component": "go-redis"}, 10*time.Second)
	noSecret(t, "the log", o.logs.String(), masterPW, sentinelPW)
}

func TestOpsRedisClusterBroker(t *testing.T) {
	addrs := redistest.StartRedisCluster(t, 3)
	o := newOpsWorker(t, opsVars("redis-cluster://"+strings.Join(addrs, ","), redistest.StartCluster(t, 3).URLs(), nil))
	o.run(t)
	o.waitReadyzBody(t, 200, 30*time.Second, "ready")
	o.roundTrip(t, "cluster")
}
