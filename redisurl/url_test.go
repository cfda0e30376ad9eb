package redisurl

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secret is a password with characters that need percent-encoding; secretParts
// are the pieces of it an error could leak when a parse cuts it apart.
const secret = "s3cr#t@x"

var secretParts = []string{"s3cr", "t@x", "#t@"}

// escaped is the user info "worker:<secret>", percent-encoded as it must be.
var escaped = url.UserPassword("worker", secret).String()

// assertNoSecret fails if msg quotes the password, whole or in part, raw or
// percent-encoded.
func assertNoSecret(t *testing.T, msg string, extra ...string) {
	t.Helper()
	for _, s := range append([]string{secret, url.QueryEscape(secret)}, append(secretParts, extra...)...) {
		if strings.Contains(msg, s) {
			t.Fatalf("error %q quotes the password part %q", msg, s)
		}
	}
}

// TestParseAccepts: well-formed URLs of any scheme come back parsed, with the
// host list and the password as written (the password percent-decoded).
func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct{ raw, host, password string }{
		{"redis://h:6379", "h:6379", ""},
		{"rediss://h:6380/2", "h:6380", ""},
		{"redis://" + escaped + "@h:6379", "h:6379", secret},
		{"redis://h", "h", ""}, // a single host may omit its port
		{"redis://[::1]:6379", "[::1]:6379", ""},
		{"  redis://h:1  ", "h:1", ""}, // surrounding blanks of an env variable
		{"redis-sentinel://" + escaped + "@s1:26379,s2:26379?master=m", "s1:26379,s2:26379", secret},
		{"redis-cluster://c1:7000,c2:7001,c3:65535", "c1:7000,c2:7001,c3:65535", ""},
		// An unescaped '@' is read as the user means: the last '@' ends the user info.
		{"redis://worker:s3cr@t@x@h:6379", "h:6379", "s3cr@t@x"},
	} {
		u, err := Parse(tc.raw)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.raw, err)
		}
		p, _ := u.User.Password()
		if u.Host != tc.host || p != tc.password {
			t.Fatalf("Parse(%q): host %q password %q, want %q %q", tc.raw, u.Host, p, tc.host, tc.password)
		}
	}
}

// TestParseRefuses: a bad URL is refused with an error that says what is
// wrong and never quotes the password, even when the password is what broke
// the parse.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"h:6379", "has no scheme"},
		{"://h:6379", "has no scheme"},
		{"redis://" + escaped + "@", "has no host"},
		{"redis:///0", "has no host"},
		{"redis://" + escaped + "@h:0", `port "0" of "h:0" is not a number in 1..65535`},
		{"redis://" + escaped + "@h:65536", `port "65536"`},
		{"redis://" + escaped + "@h:abc", `port "abc"`},
		{"redis://" + escaped + "@h:", `port ""`},
		{"redis-sentinel://" + escaped + "@s1:26379,s2?master=m", `address "s2" must be host:port`},
		{"redis-cluster://" + escaped + "@c1,c2:7000", `address "c1" must be host:port`},
		{"redis://worker:s3cr#t@x@h:6379", "percent-encode"},
		{"redis://worker:s3cr/t@x@h:6379", "percent-encode"},
		{"redis://worker:s3cr?t@x@h:6379", "percent-encode"},
		{"redis://worker:12/t@x@h:6379", "percent-encode"}, // "worker:12" looks like host:port
		{"redis://worker:12?t@x@h:6379", "percent-encode"},
		{"redis://worker:50%zz@h:6379", "percent-encode"},
		// The user info is broken and the port too: the port is named, the password is not.
		{"redis://worker:s3cr#t@x@h:0", `port "0" of "h:0"`},
	} {
		_, err := Parse(tc.raw)
		if err == nil {
			t.Fatalf("Parse(%q) accepted", tc.raw)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Parse(%q): error %q, want it to say %q", tc.raw, err, tc.want)
		}
		assertNoSecret(t, err.Error(), "50%zz")
	}
}

// TestRedact: the redacted form, used in logs and errors, masks both the user
// info password and the password query parameter (a Sentinel-managed
// master's), and keeps everything else readable.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://h:6379/1":                 "redis://h:6379/1",
		"redis://" + escaped + "@h:6379/1": "redis://worker:xxxxx@h:6379/1",
		"redis-sentinel://s:1?master=m&password=" + url.QueryEscape(secret):        "redis-sentinel://s:1?master=m&password=xxxxx",
		"redis-sentinel://" + escaped + "@s:1?password=" + url.QueryEscape(secret): "redis-sentinel://worker:xxxxx@s:1?password=xxxxx",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		got := Redact(u)
		if got != want {
			t.Fatalf("Redact(%q) = %q, want %q", raw, got, want)
		}
		assertNoSecret(t, got)
	}
}

// TestParseNodeOptions: a node URL becomes go-redis options with its address,
// db, credentials, go-redis parameters and, for rediss://, TLS.
func TestParseNodeOptions(t *testing.T) {
	o, err := ParseNode("rediss://" + escaped + "@redis.example:6380/3?dial_timeout=7s&skip_verify=true")
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != "redis.example:6380" || o.DB != 3 || o.Username != "worker" || o.Password != secret {
		t.Fatalf("options: addr %q db %d user %q password ok %v", o.Addr, o.DB, o.Username, o.Password == secret)
	}
	if o.DialTimeout.String() != "7s" || o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify {
		t.Fatalf("parameters not applied: dial %v tls %+v", o.DialTimeout, o.TLSConfig)
	}
	if o.TLSConfig.ServerName != "redis.example" {
		t.Fatalf("TLS server name %q, want the URL's host", o.TLSConfig.ServerName)
	}
	o, err = ParseNode("redis://h")
	if err != nil || o.Addr != "h:6379" || o.TLSConfig != nil {
		t.Fatalf("redis://h: %+v, %v; want h:6379 without TLS", o, err)
	}
}

// TestParseNodeRefuses: a node URL that cannot work is refused with an error
// naming the problem and showing the URL redacted, never the password (not
// even when go-redis's own message would quote it).
func TestParseNodeRefuses(t *testing.T) {
	missing := t.TempDir() + "/missing.pem"
	for _, tc := range []struct{ raw, want string }{
		{"redis-sentinel://" + escaped + "@s:26379?master=m", "scheme must be redis:// or rediss://"},
		{"unix:///tmp/redis.sock", "has no host"},
		{"redis://" + escaped + "@a:6379,b:6379", "names several servers"},
		{"redis://" + escaped + "@h:6379/x", `invalid database number: "x"`},
		{"redis://" + escaped + "@h:6379?bogus=1", "unexpected option: bogus"},
		{"redis://" + escaped + "@h:0", `port "0"`},
		{"redis://worker:s3cr?t@x@h:6379", "percent-encode"},
		{"redis://" + escaped + "@h:6379?tls_ca_file=/etc/ca.pem", "TLS parameters need the rediss:// scheme"},
		{"rediss://" + escaped + "@h:6379?tls_ca_file=" + missing, "TLS CA file: open " + missing},
		{"rediss://" + escaped + "@h:6379?tls_cert_file=" + missing + "&tls_key_file=" + missing, "TLS client certificate: open " + missing},
		{"rediss://" + escaped + "@h:6379?tls_key_file=" + missing, "needs both tls_cert_file and tls_key_file"},
	} {
		_, err := ParseNode(tc.raw)
		if err == nil {
			t.Fatalf("ParseNode(%q) accepted", tc.raw)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("ParseNode(%q): error %q, want it to say %q", tc.raw, err, tc.want)
		}
		assertNoSecret(t, err.Error())
	}
}

// tlsFiles are PEM files of a throwaway CA and of a client certificate it
// signs, with the parsed client certificate to compare against.
type tlsFiles struct {
	ca, cert, key string
	client        *x509.Certificate
}

// writeTLSFiles writes a CA and a client certificate with its key (ECDSA
// P-256, valid for an hour) in a temporary directory.
func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, ca := newCert(t, &x509.Certificate{IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	key, client := newCert(t, &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := tlsFiles{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "client.pem"),
		key: filepath.Join(dir, "client-key.pem"), client: client}
	writePEM(t, f.ca, "CERTIFICATE", ca.Raw)
	writePEM(t, f.cert, "CERTIFICATE", client.Raw)
	writePEM(t, f.key, "EC PRIVATE KEY", der)
	return f
}

// newCert completes tmpl, signs it with parent (itself when nil) and returns
// its new key and the parsed certificate.
func newCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.Subject = pkix.Name{CommonName: "redisurl test " + serial.String()}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// assertTLSFiles fails unless cfg trusts the CA of f (a certificate it signs
// verifies against cfg.RootCAs) and presents the client certificate of f.
func assertTLSFiles(t *testing.T, cfg *tls.Config, f tlsFiles) {
	t.Helper()
	opts := x509.VerifyOptions{Roots: cfg.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if cfg.RootCAs == nil {
		t.Fatal("RootCAs not set: the system roots would be used instead of the CA file")
	}
	if _, err := f.client.Verify(opts); err != nil {
		t.Fatalf("RootCAs does not hold the CA: %v", err)
	}
	if len(cfg.Certificates) != 1 || !bytes.Equal(cfg.Certificates[0].Certificate[0], f.client.Raw) {
		t.Fatalf("Certificates = %d entries, want the client certificate", len(cfg.Certificates))
	}
}

// TestAddTLSFiles: the CA file replaces the system roots and the certificate
// and key become the client certificate; empty names leave cfg alone.
func TestAddTLSFiles(t *testing.T) {
	f := writeTLSFiles(t)
	cfg := &tls.Config{}
	if err := AddTLSFiles(cfg, f.ca, f.cert, f.key); err != nil {
		t.Fatal(err)
	}
	assertTLSFiles(t, cfg, f)
	if _, err := f.client.Verify(x509.VerifyOptions{Roots: x509.NewCertPool()}); err == nil {
		t.Fatal("control: the client certificate verifies without its CA")
	}
	empty := &tls.Config{}
	if err := AddTLSFiles(empty, "", "", ""); err != nil || empty.RootCAs != nil || empty.Certificates != nil {
		t.Fatalf("no files: err %v, RootCAs %v, %d certificates", err, empty.RootCAs, len(empty.Certificates))
	}
}

// TestParseNodeTLSFiles: the TLS file parameters of a rediss:// URL reach its
// TLS configuration and are not passed on to go-redis (which refuses unknown
// parameters).
func TestParseNodeTLSFiles(t *testing.T) {
	f := writeTLSFiles(t)
	q := url.Values{ParamTLSCAFile: {f.ca}, ParamTLSCertFile: {f.cert}, ParamTLSKeyFile: {f.key}, "db": {"4"}}
	o, err := ParseNode("rediss://" + escaped + "@redis.example:6380?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	assertTLSFiles(t, o.TLSConfig, f)
	if o.DB != 4 || o.TLSConfig.ServerName != "redis.example" {
		t.Fatalf("db %d, server name %q", o.DB, o.TLSConfig.ServerName)
	}
}

// TestAddTLSFilesRefuses: a half client certificate, a missing or unreadable
// file is refused with an error naming the parameter or the file.
func TestAddTLSFilesRefuses(t *testing.T) {
	f := writeTLSFiles(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct{ ca, cert, key, want string }{
		{"", f.cert, "", "needs both tls_cert_file and tls_key_file"},
		{"", "", f.key, "needs both tls_cert_file and tls_key_file"},
		{f.ca, f.cert, "", "needs both tls_cert_file and tls_key_file"},
		{missing, "", "", "TLS CA file: open " + missing},
		{f.key, "", "", "TLS CA file " + f.key + " holds no PEM certificate"},
		{"", missing, f.key, "TLS client certificate: open " + missing},
		{"", f.cert, missing, "TLS client certificate: open " + missing},
		{"", f.cert, f.ca, "TLS client certificate"}, // a certificate given as the key
	} {
		err := AddTLSFiles(&tls.Config{}, tc.ca, tc.cert, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("AddTLSFiles(%q, %q, %q) = %v, want an error saying %q", tc.ca, tc.cert, tc.key, err, tc.want)
		}
	}
}

// TestParseNeverQuotesQueryPassword: a Sentinel URL whose master password
// parameter holds an unescaped '@' is refused without quoting any of it (the
// text after that '@' is not a host list, whatever it looks like).
func TestParseNeverQuotesQueryPassword(t *testing.T) {
	for _, pw := range []string{"s3cr@t:x", "s3cr@t@x:y", "s3cr@t,x:1"} {
		raw := "redis-sentinel://" + escaped + "@s1:26379,s2:26379?master=m&password=" + pw
		_, err := Parse(raw)
		if err == nil || !strings.Contains(err.Error(), "percent-encode") {
			t.Fatalf("Parse(%q) = %v, want an error asking to percent-encode", raw, err)
		}
		assertNoSecret(t, err.Error(), pw, "t:x", "x:y", "t,x:1")
	}
}
