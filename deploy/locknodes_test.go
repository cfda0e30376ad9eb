package deploy

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
)

// TestLockNodesAreIndependentMasters: REDLOCK_NODES names one pod of each
// lock-node StatefulSet, each a single replica with a volume, no two on
// one host, and at most one evicted at a time by a drain.
func TestLockNodesAreIndependentMasters(t *testing.T) {
	vars, _ := workerEnv(t)
	cfg, err := worker.LoadConfigFrom(vars)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, n := range cfg.RedlockNodes {
		u, err := url.Parse(n)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, u.Hostname())
	}
	var pods []string
	for _, s := range objects(t, "StatefulSet") {
		name, _ := dig(s, "metadata", "name").(string)
		if dig(s, "spec", "replicas") != 1 {
			t.Errorf("StatefulSet %s: replicas %v; a lock node is one master (replicas would be failed over to, losing writes)", name, dig(s, "spec", "replicas"))
		}
		if dig(s, "spec", "volumeClaimTemplates", 0) == nil {
			t.Errorf("StatefulSet %s has no volume: its AOF would not survive a restart", name)
		}
		if dig(s, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0, "topologyKey") != "kubernetes.io/hostname" {
			t.Errorf("StatefulSet %s: no required anti-affinity by host", name)
		}
		pods = append(pods, fmt.Sprintf("%s-0.%s", name, dig(s, "spec", "serviceName")))
	}
	slices.Sort(hosts)
	slices.Sort(pods)
	if !slices.Equal(hosts, pods) {
		t.Errorf("REDLOCK_NODES hosts %v, lock-node pods %v", hosts, pods)
	}
	pdb := object(t, "PodDisruptionBudget", "asynqlock-lock-nodes")
	if dig(pdb, "spec", "maxUnavailable") != 1 {
		t.Errorf("the lock nodes' PodDisruptionBudget allows %v down at once; with 3 nodes, 1 keeps the quorum", dig(pdb, "spec", "maxUnavailable"))
	}
}

// redisConf returns the ConfigMap's redis.conf as redis-server arguments,
// without dir (the test's server has its own).
func redisConf(t *testing.T) []string {
	t.Helper()
	conf, _ := dig(object(t, "ConfigMap", "asynqlock-lock-node"), "data", "redis.conf").(string)
	var args []string
	for line := range strings.Lines(conf) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "dir" {
			continue
		}
		for i, v := range f {
			f[i] = strings.Trim(v, `"`)
		}
		args = append(args, append([]string{"--" + f[0]}, f[1:]...)...)
	}
	if len(args) == 0 {
		t.Fatal("the lock-node ConfigMap has no redis.conf")
	}
	return args
}

// TestLockNodeSettingsPassTheNodeCheck: a real redis-server run with the
// lock-node ConfigMap's settings is one the lock client's node check finds
// safe to restart at once (AOF, fsync always) and unable to evict a lock;
// a server with redis-server's defaults is the control, found unsafe.
func TestLockNodeSettingsPassTheNodeCheck(t *testing.T) {
	report := func(args ...string) redlock.NodeReport {
		srv := redistest.StartServer(t, redistest.WithArgs(args...))
		c, err := redlock.NewFromURLs([]string{"redis://" + srv.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reps, err := c.Admin().Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return reps[0]
	}
	r := report(redisConf(t)...)
	if !survivesRestart(r) || r.MaxmemoryPolicy != "noeviction" || r.Maxmemory == 0 {
		t.Fatalf("the ConfigMap's node: appendonly %v, appendfsync %s, maxmemory %d %s; want a node that survives a restart, bounded and never evicting",
			r.AppendOnly, r.AppendFsync, r.Maxmemory, r.MaxmemoryPolicy)
	}
	if ctl := report(); survivesRestart(ctl) {
		t.Fatalf("control: a default redis-server passed as durable (appendonly %v, appendfsync %s): the check proves nothing", ctl.AppendOnly, ctl.AppendFsync)
	}
}

// TestStartScriptDelaysAnEmptyNode: the lock node's start script waits
// START_DELAY before serving when its data directory is empty (the
// delayed-restart rule) and starts at once on its own data.
func TestStartScriptDelaysAnEmptyNode(t *testing.T) {
	script, _ := dig(object(t, "ConfigMap", "asynqlock-lock-node"), "data", "start.sh").(string)
	if !strings.Contains(script, "/data/appendonlydir") || !strings.Contains(script, `sleep "${START_DELAY}"`) {
		t.Fatalf("start.sh does not wait START_DELAY when /data/appendonlydir is missing:\n%s", script)
	}
	dir := t.TempDir()
	run := func() string {
		// Run the script with /data pointed at dir, sleep and redis-server
		// replaced by echo: what it would do, without doing it.
		s := strings.ReplaceAll(script, "/data/", dir+"/")
		s = strings.ReplaceAll(s, `sleep "${START_DELAY}"`, `echo slept "${START_DELAY}"`)
		s = strings.ReplaceAll(s, "exec redis-server", "echo redis-server")
		out, err := exec.Command("sh", "-c", s).CombinedOutput()
		if err != nil {
			t.Fatalf("start.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	t.Setenv("START_DELAY", "60")
	if out := run(); !strings.Contains(out, "slept 60") {
		t.Errorf("an empty node starts at once:\n%s", out)
	}
	if err := exec.Command("mkdir", dir+"/appendonlydir").Run(); err != nil {
		t.Fatal(err)
	}
	if out := run(); strings.Contains(out, "slept") || !strings.Contains(out, "redis-server /etc/redis/redis.conf") {
		t.Errorf("a node with its data waits, or does not start:\n%s", out)
	}
}

// TestScrapeTargetsTheMetricsPort: the ServiceMonitor and the plain scrape
// job both reach the port the worker's METRICS_ADDR listens on, at
// /metrics; promtool accepts the scrape config and its rule file.
func TestScrapeTargetsTheMetricsPort(t *testing.T) {
	svc := object(t, "Service", "asynqlock-worker")
	sm := object(t, "ServiceMonitor", "asynqlock-worker")
	if dig(sm, "spec", "endpoints", 0, "port") != dig(svc, "spec", "ports", 0, "name") || dig(svc, "spec", "ports", 0, "port") != 10090 {
		t.Errorf("ServiceMonitor port %v, Service port %v %v", dig(sm, "spec", "endpoints", 0, "port"), dig(svc, "spec", "ports", 0, "name"), dig(svc, "spec", "ports", 0, "port"))
	}
	if dig(sm, "spec", "endpoints", 0, "path") != "/metrics" {
		t.Errorf("ServiceMonitor path %v", dig(sm, "spec", "endpoints", 0, "path"))
	}
	prom := yamlDocs(t, "prometheus/prometheus.yml")[0]
	relabels := fmt.Sprint(dig(prom, "scrape_configs", 0, "relabel_configs"))
	if !strings.Contains(relabels, "regex:metrics") || dig(prom, "scrape_configs", 0, "metrics_path") != "/metrics" {
		t.Errorf("the scrape job does not keep the port named metrics at /metrics: %s", relabels)
	}
	// Debian's promtool is built without Kubernetes discovery: the rest
	// of the file is checked with the discovery replaced by a static target.
	promtool := requireTool(t, "prometheus", "check the scrape config", "promtool")
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	k8s := "kubernetes_sd_configs:\n      - role: pod\n"
	if !strings.Contains(string(b), k8s) {
		t.Fatalf("prometheus.yml lacks %q", k8s)
	}
	static := strings.Replace(string(b), k8s, "static_configs:\n      - targets: [\"127.0.0.1:10090\"]\n", 1)
	abs, err := filepath.Abs("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	static = strings.Replace(static, "  - alerts.yml\n", "  - "+abs+"\n", 1)
	conf := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(conf, []byte(static), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", conf).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// survivesRestart is the worker's judgement of a node that keeps its locks
// across a restart (every write on disk before it is acknowledged).
func survivesRestart(r redlock.NodeReport) bool {
	return r.AppendOnly && r.AppendFsync == "always"
}
