package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartServerWithUserOnly(t *testing.T) {
	s := StartServer(t, WithUser("app", "pw"), WithoutDefaultUser())
	ctx := context.Background()
	anon := Client(t, s.Addr())
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("anonymous PING: %v, want NOAUTH", err)
	}
	o := ClientOptions(s.Addr())
	o.Username, o.Password = "app", "pw"
	c := redis.NewClient(o)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING as app: %v", err)
	}
}

func TestStartServerWithTLS(t *testing.T) {
	files := NewTLSFiles(t)
	s := StartServer(t, WithTLS(files, true))
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ping := func(cfg *tls.Config) error {
		o := ClientOptions(s.TLSAddr())
		o.TLSConfig = cfg
		c := redis.NewClient(o)
		defer c.Close()
		return c.Ping(context.Background()).Err()
	}
	if err := ping(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}); err != nil {
		t.Fatalf("PING over TLS with the CA and a client certificate: %v", err)
	}
	if err := ping(&tls.Config{Certificates: []tls.Certificate{cert}}); err == nil {
		t.Fatal("a client without the private CA trusted the server")
	}
	if err := ping(&tls.Config{RootCAs: pool}); err == nil {
		t.Fatal("the server accepted a client without a certificate")
	}
}

func TestStartSentinelAnswersForItsMaster(t *testing.T) {
	master := StartServer(t, WithPassword("mpw"))
	addr := StartSentinel(t, "m", master.Addr(), "mpw", "spw")
	o := ClientOptions(addr)
	o.Password = "spw"
	c := redis.NewSentinelClient(&redis.Options{Addr: o.Addr, Password: o.Password, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout})
	defer c.Close()
	got, err := c.GetMasterAddrByName(context.Background(), "m").Result()
	if err != nil || len(got) != 2 || got[0]+":"+got[1] != master.Addr() {
		t.Fatalf("master of m: %v, %v; want %s", got, err, master.Addr())
	}
}

func TestClosedAddrRefuses(t *testing.T) {
	if err := Client(t, ClosedAddr(t)).Ping(context.Background()).Err(); err == nil {
		t.Fatal("something answered at ClosedAddr")
	}
}

// TestClosedAddrStaysClosed: the address refuses connections, and no
// listener (not even one on port 0 asking the kernel for any) can take it
// while the test runs.
func TestClosedAddrStaysClosed(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("%s accepted a connection", addr)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close()
		t.Fatalf("a listener took %s", addr)
	}
}
