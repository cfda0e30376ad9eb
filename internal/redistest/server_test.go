package redistest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recordingTB is a testing.TB whose Fatalf and Skipf record the message and
// return instead of ending the test.
type recordingTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func (r *recordingTB) Skipf(format string, args ...any) { r.skip = fmt.Sprintf(format, args...) }

func missing() (string, error) { return "", errors.New("not installed") }

func TestRequireServerMissingFailsInCI(t *testing.T) {
	t.Setenv("CI", "true")
	rec := &recordingTB{TB: t}
	if got := requireServer(rec, missing); got != "" {
		t.Errorf("path = %q, want empty", got)
	}
	if rec.skip != "" {
		t.Errorf("skipped in CI: %s", rec.skip)
	}
	if !strings.Contains(rec.fatal, "apt-get install redis-server") {
		t.Errorf("Fatalf message %q lacks install instructions", rec.fatal)
	}
}

func TestRequireServerMissingSkipsLoudlyOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	rec := &recordingTB{TB: t}
	requireServer(rec, missing)
	if rec.fatal != "" {
		t.Errorf("failed outside CI: %s", rec.fatal)
	}
	for _, want := range []string{"SKIPPED", "apt-get install redis-server"} {
		if !strings.Contains(rec.skip, want) {
			t.Errorf("Skipf message %q lacks %q", rec.skip, want)
		}
	}
}

func TestRequireServerFound(t *testing.T) {
	t.Setenv("CI", "true")
	rec := &recordingTB{TB: t}
	got := requireServer(rec, func() (string, error) { return "/x/redis-server", nil })
	if got != "/x/redis-server" || rec.fatal != "" || rec.skip != "" {
		t.Errorf("got %q, fatal %q, skip %q", got, rec.fatal, rec.skip)
	}
}

func TestLookupServerEnvOverride(t *testing.T) {
	t.Setenv(ServerEnv, t.TempDir()+"/no-such-redis-server")
	if p, err := lookupServer(); err == nil {
		t.Errorf("lookupServer with a bad %s = %q, want an error", ServerEnv, p)
	}
	t.Setenv(ServerEnv, "")
	path := RequireServer(t)
	t.Setenv(ServerEnv, path)
	if p, err := lookupServer(); err != nil || p != path {
		t.Errorf("lookupServer = %q, %v; want %q", p, err, path)
	}
}
