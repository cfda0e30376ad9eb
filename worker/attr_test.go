package worker

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// wantAttr fails unless attrs has k = want.
func wantAttr(t *testing.T, what string, attrs []attribute.KeyValue, k attribute.Key, want string) {
	t.Helper()
	for _, a := range attrs {
		if a.Key == k {
			if a.Value.String() != want {
				t.Fatalf("%s: %s = %q, want %q", what, k, a.Value.String(), want)
			}
			return
		}
	}
	t.Fatalf("%s: %s not set, want %q", what, k, want)
}
