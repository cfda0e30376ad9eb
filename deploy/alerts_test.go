package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAlertRulesUnit runs `promtool test rules` on alerts_test.yml: each
// alert fires on its failing series and stays quiet on a healthy group's.
func TestAlertRulesUnit(t *testing.T) {
	promtool := requireTool(t, "prometheus", "unit-test the alert rules", "promtool")
	out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "prometheus"
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// Every alert of alerts.yml is tested there, and has a runbook line.
	rules := yamlDocs(t, "prometheus/alerts.yml")[0]
	tests := strings.Join(fieldStrings(yamlDocs(t, "prometheus/alerts_test.yml")[0], "alertname"), " ")
	runbook := readDoc(t, "../docs/guide/OPERATIONS.md")
	for _, name := range fieldStrings(rules, "alert") {
		if !strings.Contains(" "+tests+" ", " "+name+" ") {
			t.Errorf("alert %s has no promtool test", name)
		}
		if !strings.Contains(runbook, "`"+name+"`") {
			t.Errorf("alert %s has no runbook line in docs/guide/OPERATIONS.md", name)
		}
	}
}

// fieldStrings collects the string values of key anywhere in v.
func fieldStrings(v any, key string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == key {
				out = append(out, s)
			}
			out = append(out, fieldStrings(e, key)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, fieldStrings(e, key)...)
		}
	}
	return out
}
