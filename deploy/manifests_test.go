package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/worker"
)

// TestEveryFileParses: every YAML document and JSON file under deploy/
// decodes, and each Kubernetes object names its kind and version.
func TestEveryFileParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			docs := yamlDocs(t, path)
			if len(docs) == 0 {
				t.Errorf("%s: no YAML document", path)
			}
			for i, d := range docs {
				if strings.HasPrefix(path, "kubernetes") && (d["apiVersion"] == nil || d["kind"] == nil) {
					t.Errorf("%s: document %d lacks apiVersion or kind", path, i+1)
				}
			}
			n++
		case ".json":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 7 {
		t.Fatalf("parsed %d files: deploy/ is not where the test looked", n)
	}
}

// workerVars are the variables worker.LoadConfig reads (its Config's env
// tags); OTEL_* variables are read too (tracing).
func workerVars() map[string]bool {
	vars := map[string]bool{}
	ct := reflect.TypeFor[worker.Config]()
	for i := range ct.NumField() {
		if name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ","); name != "" {
			vars[name] = true
		}
	}
	return vars
}

// placeholder is the value a test gives a variable taken from a Secret.
const placeholder = "from-a-secret"

var refPattern = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv resolves a container's env as the kubelet does: values from
// Secrets get a placeholder, $(NAME) expands a variable defined before. It
// returns the variables and the names some value referred to.
func containerEnv(t *testing.T, c map[string]any) (map[string]string, map[string]bool) {
	t.Helper()
	vars, referred := map[string]string{}, map[string]bool{}
	list, _ := c["env"].([]any)
	for _, e := range list {
		name, _ := dig(e, "name").(string)
		value, isValue := dig(e, "value").(string)
		switch {
		case isValue:
			value = refPattern.ReplaceAllStringFunc(value, func(ref string) string {
				ref = refPattern.FindStringSubmatch(ref)[1]
				v, ok := vars[ref]
				if !ok {
					t.Errorf("env %s refers to $(%s), not defined before it: the kubelet would leave it as is", name, ref)
				}
				referred[ref] = true
				return v
			})
		case dig(e, "valueFrom", "secretKeyRef") != nil:
			value = placeholder
		default:
			t.Errorf("env %s has neither a value nor a secretKeyRef", name)
		}
		vars[name] = value
	}
	return vars, referred
}

// workerEnv returns the worker Deployment's container env, resolved.
func workerEnv(t *testing.T) (map[string]string, map[string]bool) {
	t.Helper()
	return containerEnv(t, container(t, object(t, "Deployment", "asynqlock-worker"), "worker"))
}

// TestWorkerEnvIsAValidConfig: every variable the worker Deployment sets is
// one worker.LoadConfig reads (or a Secret's value another one refers to),
// and LoadConfig accepts them all.
func TestWorkerEnvIsAValidConfig(t *testing.T) {
	vars, referred := workerEnv(t)
	known := workerVars()
	for name := range vars {
		if !known[name] && !strings.HasPrefix(name, "OTEL_") && !referred[name] {
			t.Errorf("the Deployment sets %s, which worker.LoadConfig does not read", name)
		}
	}
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatalf("worker.LoadConfig refuses the Deployment's environment: %v", err)
	}
	if cfg.MetricsAddr != ":10090" {
		t.Errorf("METRICS_ADDR resolves to %q: the probes need every interface, :10090", cfg.MetricsAddr)
	}
	if len(cfg.RedlockNodes) != 3 {
		t.Errorf("REDLOCK_NODES names %d nodes, want the 3 lock-node StatefulSets", len(cfg.RedlockNodes))
	}
	if strings.Contains(fmt.Sprint(cfg.RedlockNodes), "$(") {
		t.Errorf("REDLOCK_NODES kept an unexpanded reference: %v", cfg.RedlockNodes)
	}
}

// TestGracePeriodCoversShutdown: the kubelet's SIGKILL comes after the
// worker's whole shutdown: hosted cron jobs get WORKER_SHUTDOWN_TIMEOUT,
// then running tasks get it again, then up to 1s for lock releases and 5s
// for the HTTP endpoint (worker/run.go, worker/http.go).
func TestGracePeriodCoversShutdown(t *testing.T) {
	vars, _ := workerEnv(t)
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	grace, ok := dig(object(t, "Deployment", "asynqlock-worker"), "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	if !ok {
		t.Fatal("the worker Deployment sets no terminationGracePeriodSeconds (the default 30s equals the worker's default shutdown timeout)")
	}
	need := 2*cfg.ShutdownTimeout + 6*time.Second
	if time.Duration(grace)*time.Second <= need {
		t.Fatalf("terminationGracePeriodSeconds %d, WORKER_SHUTDOWN_TIMEOUT %v: the grace must exceed %v", grace, cfg.ShutdownTimeout, need)
	}
	t.Logf("grace %ds > 2 x %v + 6s", grace, cfg.ShutdownTimeout)
}

// probe returns a probe's HTTP path and the container port it names.
func probe(t *testing.T, c map[string]any, which string) (string, int) {
	t.Helper()
	path, _ := dig(c, which, "httpGet", "path").(string)
	port := dig(c, which, "httpGet", "port")
	if name, ok := port.(string); ok {
		ports, _ := c["ports"].([]any)
		for _, p := range ports {
			if dig(p, "name") == name {
				port = dig(p, "containerPort")
			}
		}
	}
	n, ok := port.(int)
	if path == "" || !ok {
		t.Fatalf("%s: want an httpGet path and a port, got %q %v", which, path, port)
	}
	return path, n
}

// TestProbesReachTheWorker: the probes name the port METRICS_ADDR listens
// on, and their paths answer as probes should on a real worker run with
// the Deployment's environment (lock nodes and broker replaced by local
// redis-servers, the port by a free one): /healthz 200, /readyz 200 once
// the broker and a quorum answer.
func TestProbesReachTheWorker(t *testing.T) {
	c := container(t, object(t, "Deployment", "asynqlock-worker"), "worker")
	vars, _ := workerEnv(t)
	_, port, err := net.SplitHostPort(vars["METRICS_ADDR"])
	if err != nil {
		t.Fatal(err)
	}
	live, livePort := probe(t, c, "livenessProbe")
	ready, readyPort := probe(t, c, "readinessProbe")
	if fmt.Sprint(livePort) != port || fmt.Sprint(readyPort) != port {
		t.Fatalf("probes on ports %d and %d, METRICS_ADDR on %s", livePort, readyPort, port)
	}
	if live != "/healthz" || ready != "/readyz" {
		t.Errorf("liveness %s, readiness %s: the worker's are /healthz (the process serves) and /readyz (broker and quorum)", live, ready)
	}
	w := startWorker(t, vars, 3)
	waitHTTP(t, "http://"+w.Addr()+ready, 200, 30*time.Second)
	waitHTTP(t, "http://"+w.Addr()+live, 200, 5*time.Second)
}
