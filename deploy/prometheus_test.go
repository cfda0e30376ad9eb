package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
)

// promServer is a real Prometheus started for a test.
type promServer struct{ base string }

// startPrometheus runs Prometheus on a free loopback port with a temporary
// storage directory, scraping target and evaluating rules every second,
// until the test ends.
func startPrometheus(t *testing.T, target string, rules ...string) *promServer {
	t.Helper()
	bin := requireTool(t, "prometheus", "run the dashboard's queries and the alert rules on a live Prometheus", "prometheus")
	dir := t.TempDir()
	conf := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: %s
scrape_configs:
  - job_name: asynqlock-worker
    static_configs: [{targets: [%q]}]
`, jsonList(rules), target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		p := &promServer{base: "http://" + addr}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
		out := &workertest.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cancel(); <-exited })
		if p.waitReady(exited, 60*time.Second) {
			return p
		}
		cancel()
		<-exited
		if attempt == 3 {
			t.Fatalf("prometheus did not become ready on %s (3 attempts):\n%s", addr, out)
		}
	}
}

// waitReady waits for /-/ready, or for the process to exit (a port taken
// meanwhile).
func (p *promServer) waitReady(exited <-chan struct{}, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true
			}
		}
	}
	return false
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// float returns the sample's value.
func (s sample) float() float64 {
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return 0
	}
	return f
}

// query evaluates expr now; an error is the API's.
func (p *promServer) query(expr string) ([]sample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []sample `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want a vector", r.Data.ResultType)
	}
	return r.Data.Result, nil
}

// rule is a rule's state as /api/v1/rules reports it.
type rule struct {
	Name           string `json:"name"`
	Health         string `json:"health"`
	LastError      string `json:"lastError"`
	State          string `json:"state"`
	LastEvaluation string `json:"lastEvaluation"`
}

// rules returns every loaded rule's state.
func (p *promServer) rules() ([]rule, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []rule `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/rules", &r); err != nil {
		return nil, err
	}
	var out []rule
	for _, g := range r.Data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

func (p *promServer) get(path string, v any) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// freeAddr returns a loopback address free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func jsonList(s []string) string {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s)
	return string(b)
}
