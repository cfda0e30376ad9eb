package middleware

import (
	"os/exec"
	"strings"
	"testing"
)

// TestParkingRefusesUntestedAsynq: WithBroker is refused with a message
// naming the version and the fix on an asynq version parking was not tested
// against, and accepted on the one this suite runs with (go.mod's). A test
// binary carries no dependency versions; the demo's process test
// (examples/inventory) runs a built program, whose build information names
// asynq, with WithBroker.
func TestParkingRefusesUntestedAsynq(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", asynqModule).Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(out)); checkAsynq(v) != nil {
		t.Fatalf("the suite runs with asynq %s, which WithBroker refuses: %v", v, checkAsynq(v))
	}
	for _, v := range []string{"v0.27.0", "v0.25.1", "v0.26.1-0.20260101000000-abcdef123456"} {
		err := checkAsynq(v)
		if err == nil || !strings.Contains(err.Error(), v) || !strings.Contains(err.Error(), "require github.com/hibiken/asynq v0.26.0") {
			t.Errorf("asynq %s: %v, want a refusal naming it and the version to require", v, err)
		}
	}
}
