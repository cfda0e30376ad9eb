package redisurl

import (
	"slices"
	"strings"
	"testing"
)

// TestParseClusterNode: one cluster per URL, further seeds as addr
// parameters, user info and TLS as for a single server.
func TestParseClusterNode(t *testing.T) {
	o, err := parseClusterNode("redis-cluster://" + escaped + "@a1:7000?addr=a2:7001&addr=a3:7002")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a1:7000", "a2:7001", "a3:7002"}; !slices.Equal(o.Addrs, want) {
		t.Fatalf("Addrs = %v, want %v", o.Addrs, want)
	}
	if o.Username != "worker" || o.Password != secret || o.TLSConfig != nil {
		t.Fatalf("user %q, password ok %v, TLS %v", o.Username, o.Password == secret, o.TLSConfig != nil)
	}
	o, err = parseClusterNode("rediss-cluster://a1:7000")
	if err != nil || o.TLSConfig == nil || o.TLSConfig.ServerName != "a1" {
		t.Fatalf("rediss-cluster: %v, %+v", err, o)
	}
}

// TestParseClusterNodeRefuses: a comma, a database, a misspelt parameter or
// TLS files without TLS are refused, never quoting the password.
func TestParseClusterNodeRefuses(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redis-cluster://" + escaped + "@a1:7000,a2:7001", "addr="},
		{"redis-cluster://" + escaped + "@a1:7000/1", "database 0"},
		{"redis-cluster://" + escaped + "@a1:7000?adr=a2:1", "unexpected option"},
		{"redis-cluster://" + escaped + "@a1:7000?addr=a2", "addr param"},
		{"redis-cluster://" + escaped + "@a1:7000?tls_ca_file=x", "rediss-cluster"},
		{"redis://" + escaped + "@a1:7000", "scheme must be"},
	} {
		_, err := parseClusterNode(tc.raw)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("parseClusterNode(%q) = %v, want an error with %q", tc.raw, err, tc.want)
		}
		assertNoSecret(t, err.Error())
	}
}

// TestParseLockNode: either form, and a scheme error names both.
func TestParseLockNode(t *testing.T) {
	if s, c, err := ParseLockNode("redis://h:1"); err != nil || s == nil || c != nil {
		t.Fatalf("single: %v %v %v", s, c, err)
	}
	if s, c, err := ParseLockNode(" redis-cluster://h:1"); err != nil || s != nil || c == nil {
		t.Fatalf("cluster: %v %v %v", s, c, err)
	}
	_, _, err := ParseLockNode("redis-sentinel://h:1?master=m")
	if err == nil || !strings.Contains(err.Error(), "redis-cluster://") {
		t.Fatalf("sentinel: %v, want the cluster form named", err)
	}
}
