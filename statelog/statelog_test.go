package statelog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// lines logs at Debug and above to a buffer, one text line per record.
func lines() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

// TestFlappingNodeLogsOneOutage: a node that fails every other call, 3ms
// apart, is one outage: one Warn with its address and cause, repeats at
// Debug, and one Info at the first call that works a settle time after the
// last failure. Control: without a settle time the same calls make a Warn
// and an Info per failure.
func TestFlappingNodeLogsOneOutage(t *testing.T) {
	for _, tc := range []struct {
		settle           time.Duration
		wantWarn, wantUp int
	}{{Settle, 1, 1}, {0, 10, 10}} {
		synctest.Test(t, func(t *testing.T) {
			log, out := lines()
			st := State{Settle: tc.settle}
			cause := errors.New("dial tcp: connection refused")
			for i := range 20 { // fail, work, fail, work, ...
				time.Sleep(3 * time.Millisecond)
				if i%2 == 0 {
					st.Fail(log, slog.LevelWarn, "lock node unreachable", cause, "addr", "127.0.0.1:6390")
				} else {
					st.OK(log, "lock node reachable again", "addr", "127.0.0.1:6390")
				}
			}
			if tc.settle > 0 && strings.Contains(out.String(), "level=INFO") {
				t.Fatalf("settle %v: recovery logged while still flapping:\n%s", tc.settle, out)
			}
			time.Sleep(Settle) // quiet since
			st.OK(log, "lock node reachable again", "addr", "127.0.0.1:6390")
			st.OK(log, "lock node reachable again", "addr", "127.0.0.1:6390")
			warn, info := strings.Count(out.String(), "level=WARN"), strings.Count(out.String(), "level=INFO")
			if warn != tc.wantWarn || info != tc.wantUp {
				t.Fatalf("settle %v: %d Warn and %d Info lines, want %d and %d:\n%s", tc.settle, warn, info, tc.wantWarn, tc.wantUp, out)
			}
			first := strings.SplitN(out.String(), "\n", 2)[0]
			if !strings.Contains(first, "addr=127.0.0.1:6390") || !strings.Contains(first, "connection refused") {
				t.Fatalf("the Warn line does not name the node and the cause: %s", first)
			}
			if tc.settle > 0 && !strings.Contains(out.String(), `after="lock node unreachable" repeats=9`) {
				t.Fatalf("the Info line does not say what ended:\n%s", out)
			}
		})
	}
}

// TestAnotherFailureIsAChange: a failure of another kind while failing is a
// change of state, logged at its level; the same one again is not.
func TestAnotherFailureIsAChange(t *testing.T) {
	log, out := lines()
	var st State
	for _, msg := range []string{"a", "a", "b", "b"} {
		st.Fail(log, slog.LevelError, msg, nil)
	}
	if n := strings.Count(out.String(), "level=ERROR"); n != 2 || st.Failing() != "b" {
		t.Fatalf("%d Error lines (want 2), failing %q:\n%s", n, st.Failing(), out)
	}
}

// TestNeverLogsAPassword: an address or a cause that carries credentials
// (a redis:// URL with user:password@) is logged without them. Control: the
// same text without a scheme is left as it is.
func TestNeverLogsAPassword(t *testing.T) {
	log, out := lines()
	var st State
	st.Fail(log, slog.LevelWarn, "broker unreachable", errors.New("dial rediss://app:s3cret@10.0.0.1:6380/0: refused"),
		"addr", "redis://:s3cret@10.0.0.1:6379")
	st.OK(log, "broker reachable again", "addr", "redis://app:s3cret@10.0.0.1:6379", "note", "plain app:s3cret@x")
	got := out.String()
	if strings.Count(got, "s3cret") != 1 || !strings.Contains(got, "note=\"plain app:s3cret@x\"") {
		t.Fatalf("credentials logged (or the control was changed):\n%s", got)
	}
	if !strings.Contains(got, "addr=redis://10.0.0.1:6379") || !strings.Contains(got, "rediss://10.0.0.1:6380/0") {
		t.Fatalf("the address was not kept:\n%s", got)
	}
}
