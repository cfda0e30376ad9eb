package workerconfig

import (
	"strings"
	"testing"
)

// TestWithTLSDefaultsFillsOnlyWhatARedissURLLacks: the environment's files
// go to rediss URLs, never over a file the URL names itself.
func TestWithTLSDefaultsFillsOnlyWhatARedissURLLacks(t *testing.T) {
	f := TLSFiles{CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem"}
	if got := WithTLSDefaults("redis://h:1", f); got != "redis://h:1" {
		t.Fatalf("plain URL changed: %s", got)
	}
	got := WithTLSDefaults("rediss://h:1?tls_ca_file=/own.pem", f)
	for _, want := range []string{"tls_ca_file=%2Fown.pem", "tls_cert_file=%2Fc.pem", "tls_key_file=%2Fk.pem"} {
		if !strings.Contains(got, want) {
			t.Fatalf("%s lacks %s", got, want)
		}
	}
}
