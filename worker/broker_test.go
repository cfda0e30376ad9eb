package worker

import (
	"strings"
	"testing"

	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/hibiken/asynq"
)

// TestBrokerURLErrorsNameTheRealProblem: a URL without a scheme or with a
// bad port is not blamed on the password, and no message shows it.
func TestBrokerURLErrorsNameTheRealProblem(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1:6379":                                          "no scheme",
		"localhost:6379":                                          "no scheme",
		"redis://:secretpw@h:99999":                               `port "99999"`,
		"redis://:secretpw@h:63x9/0":                              `port "63x9"`,
		"redis://u:secret/pw@h:6379":                              "percent-encode",
		"redis://u:secret#pw@h:6379":                              "percent-encode",
		"redis-sentinel://s1:1?master=m&x=1":                      `unknown parameter "x"`,
		"redis-sentinel://s1:1/2?master=m&db=3&password=secretpw": "database given twice",
		"redis://:secretpw@h:1?" + "tls_ca_file=/x.pem":           "rediss",
	}
	for raw, want := range cases {
		_, err := parseBroker(raw, workerconfig.TLSFiles{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", raw, err, want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error shows the password: %v", raw, err)
		}
		if want != "percent-encode" && strings.Contains(err.Error(), "percent-encode") {
			t.Errorf("%s: error blames the password: %v", raw, err)
		}
	}
}

// TestBrokerURLKeepsUserMasterPasswordAndDB: what asynq's own parser drops.
func TestBrokerURLKeepsUserMasterPasswordAndDB(t *testing.T) {
	single, err := parseBroker("redis://worker:pw@h:6379/4", workerconfig.TLSFiles{})
	if c, ok := single.opt.(asynq.RedisClientOpt); err != nil || !ok || c.Username != "worker" || c.Password != "pw" || c.DB != 4 {
		t.Fatalf("ACL URL: %#v, %v", single.opt, err)
	}
	b, err := parseBroker("redis-sentinel://sen:spw@s1:26379,s2:26379/5?master=mymaster&username=app&password=mpw", workerconfig.TLSFiles{})
	c, ok := b.opt.(asynq.RedisFailoverClientOpt)
	if err != nil || !ok || c.SentinelUsername != "sen" || c.SentinelPassword != "spw" || c.Username != "app" ||
		c.Password != "mpw" || c.DB != 5 || c.MasterName != "mymaster" || len(c.SentinelAddrs) != 2 {
		t.Fatalf("sentinel URL: %#v, %v", b.opt, err)
	}
	if strings.Contains(b.addr, "pw") {
		t.Fatalf("broker address for logs shows a password: %s", b.addr)
	}
}

// TestConfigURLProblemsNameVariableAndMaskedURL: the variable, the URL with
// its password masked, and the real problem.
func TestConfigURLProblemsNameVariableAndMaskedURL(t *testing.T) {
	vars := map[string]string{
		"ASYNQ_REDIS_URL":     "redis://u:secretpw@broker:6379?tls_ca_file=/ca.pem",
		"REDLOCK_NODES":       "redis://a:1,redis://:secretpw@b:99999",
		"REDLOCK_TLS_CA_FILE": "/nonexistent/ca.pem",
		"ASYNQ_TLS_CERT_FILE": "/nonexistent/c.pem",
	}
	_, err := LoadConfigFrom(vars)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		`ASYNQ_REDIS_URL: URL "redis://u:xxxxx@broker:6379?tls_ca_file=/ca.pem": TLS parameters need the rediss:// scheme`,
		`REDLOCK_NODES: node 1: URL "redis://:xxxxx@b:99999": port "99999"`,
		"REDLOCK_TLS_CA_FILE: TLS CA file: open /nonexistent/ca.pem",
		"ASYNQ_TLS_CERT_FILE and ASYNQ_TLS_KEY_FILE: a TLS client certificate needs both",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "secretpw") {
		t.Fatalf("error shows a password:\n%s", msg)
	}
}
