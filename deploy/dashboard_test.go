package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/workertest"
	"github.com/asynqlock/asynqlock/middleware"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/hibiken/asynq"
)

// panelQuery is one query of the dashboard.
type panelQuery struct{ panel, expr string }

// dashboardQueries returns every target of deploy/grafana/asynqlock.json.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readDoc(t, "grafana/asynqlock.json")), &d); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, panelQuery{p.Title, tg.Expr})
		}
	}
	return out
}

// grafanaVars stands in for the dashboard's variables: every job, and
// rate windows that span the whole test.
var grafanaVars = strings.NewReplacer(`$job`, `.+`, `$__rate_interval`, `2m`, `$__range`, `2m`)

// seriesNames are the names of the samples on an exposition.
func seriesNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(exposition) {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\basynq(?:lock)?_[a-z_]+\b`)

// unexported returns the series expr names that the worker does not export.
func unexported(expr string, exported map[string]bool) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		if !exported[n] {
			out = append(out, n)
		}
	}
	return out
}

// mixedLoad registers a task type and a cron job on w: tasks on one hot
// SKU and on many cold ones, some failing (rolled back, not retried), and
// a tick every second. It returns a counter of handled tasks.
func mixedLoad(t *testing.T, w *worker.Worker) *atomic.Int32 {
	t.Helper()
	var handled atomic.Int32
	h := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		defer handled.Add(1)
		time.Sleep(5 * time.Millisecond)
		if strings.Contains(string(task.Payload()), `"fail":true`) {
			return fmt.Errorf("adjustment refused")
		}
		return nil
	})
	undo := func(context.Context, *asynq.Task, error) error { return nil }
	if err := w.Handle("stock:adjust", h, middleware.ByField("sku"), middleware.WithRollback(undo)); err != nil {
		t.Fatal(err)
	}
	s, err := w.Scheduler()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register("tick", "* * * * * *", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return &handled
}

// enqueueMixed enqueues hot tasks on one SKU, cold ones on a SKU each and
// failing ones; it returns how many.
func enqueueMixed(t *testing.T, c *asynq.Client) int {
	t.Helper()
	var tasks []*asynq.Task
	// The hot SKU's tasks first: more of them reach the worker at once
	// than may wait there, so some are parked and promoted.
	for i := range 40 {
		tasks = append(tasks, asynq.NewTask("stock:adjust", fmt.Appendf(nil, `{"sku":"HOT","n":%d}`, i)))
	}
	for i := range 40 {
		tasks = append(tasks, asynq.NewTask("stock:adjust", fmt.Appendf(nil, `{"sku":"cold-%d"}`, i)))
	}
	for i := range 5 {
		tasks = append(tasks, asynq.NewTask("stock:adjust", fmt.Appendf(nil, `{"sku":"bad-%d","fail":true}`, i), asynq.MaxRetry(0)))
	}
	for _, task := range tasks {
		if _, err := c.Enqueue(task); err != nil {
			t.Fatal(err)
		}
	}
	return len(tasks)
}

// TestDashboardAndAlertsOnALivePrometheus: a real Prometheus scrapes a real
// worker (the Deployment's environment, local redis-servers) under a mixed
// load with a hot SKU. Every panel's query names only series the worker
// exports and returns data (numbers, not NaN); every alert rule of
// alerts.yml loads and evaluates without error.
func TestDashboardAndAlertsOnALivePrometheus(t *testing.T) {
	requireTool(t, "prometheus", "run the dashboard's queries on a live Prometheus", "prometheus")
	vars, _ := workerEnv(t)
	vars["WORKER_CONCURRENCY"] = "4"
	w := newWorker(t, vars, 3)
	handled := mixedLoad(t, w)
	workertest.Run(t, w)
	waitHTTP(t, "http://"+w.Addr()+"/readyz", 200, 30*time.Second)
	alerts, err := filepath.Abs("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, w.Addr(), alerts)
	// The load starts once the worker's counters have a sample at 0: a
	// rate needs their rise, not their first value.
	waitScraped(t, prom, 30*time.Second)

	n := enqueueMixed(t, w.Client())
	for deadline := time.Now().Add(60 * time.Second); int(handled.Load()) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks handled in 60s", handled.Load(), n)
		}
	}

	exported := seriesNames(scrape(t, w.Addr()))
	queries := dashboardQueries(t)
	if bad := unexported(`rate(asynqlock_task_conflict_total[1m])`, exported); len(bad) != 1 {
		t.Fatalf("control: a misspelt series passed the name check (%v)", bad)
	}
	for _, q := range queries {
		if bad := unexported(q.expr, exported); len(bad) > 0 {
			t.Errorf("panel %q queries %v, which the worker does not export", q.panel, bad)
		}
	}
	empty := waitForData(t, prom, queries, 60*time.Second)
	for _, e := range empty {
		t.Errorf("panel %q: %s", e.panel, e.expr)
	}
	checkRules(t, prom, exported)
	t.Logf("%d queries of %d panels returned data from a live Prometheus; %d tasks (40 on one hot SKU)", len(queries), countPanels(queries), n)
}

// waitForData evaluates every query until each has returned at least one
// sample and no NaN, at most limit (a scrape that timed out on a busy
// machine leaves gauges stale for a moment: a query counts once it had
// data); it returns those that never did, their last answer in expr.
func waitForData(t *testing.T, prom *promServer, queries []panelQuery, limit time.Duration) []panelQuery {
	t.Helper()
	last := map[int]string{} // the queries without data yet, by index: their last answer
	for i := range queries {
		last[i] = "not evaluated"
	}
	for deadline := time.Now().Add(limit); len(last) > 0 && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for i := range last {
			expr := grafanaVars.Replace(queries[i].expr)
			res, err := prom.query(expr)
			switch {
			case err != nil:
				last[i] = expr + ": " + err.Error()
			case len(res) == 0:
				last[i] = expr + ": no data"
			case hasNaN(res):
				last[i] = expr + ": NaN"
			default:
				delete(last, i)
			}
		}
	}
	var failing []panelQuery
	for i, answer := range last {
		failing = append(failing, panelQuery{queries[i].panel, answer})
	}
	return failing
}

func hasNaN(res []sample) bool {
	for _, s := range res {
		if math.IsNaN(s.float()) {
			return true
		}
	}
	return false
}

// checkRules waits until every alert rule was evaluated once, and checks
// that each evaluated without error and names only exported series.
func checkRules(t *testing.T, prom *promServer, exported map[string]bool) {
	t.Helper()
	doc := yamlDocs(t, "prometheus/alerts.yml")[0]
	exprs := fieldStrings(doc, "expr")
	for _, e := range exprs {
		if bad := unexported(e, exported); len(bad) > 0 {
			t.Errorf("alert rule queries %v, which the worker does not export: %s", bad, e)
		}
	}
	var rules []rule
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		var err error
		if rules, err = prom.rules(); err != nil {
			t.Fatal(err)
		}
		evaluated := 0
		for _, r := range rules {
			if !strings.HasPrefix(r.LastEvaluation, "0001-") && r.Health != "unknown" {
				evaluated++
			}
		}
		if len(rules) == len(exprs) && evaluated == len(rules) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d alert rules loaded, %d evaluated within 30s", len(rules), len(exprs), evaluated)
		}
	}
	var states []string
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" {
			t.Errorf("alert %s: health %s: %s", r.Name, r.Health, r.LastError)
		}
		states = append(states, r.Name+"="+r.State)
	}
	sort.Strings(states)
	t.Logf("alert rules evaluated on the live Prometheus: %s", strings.Join(states, " "))
}

func countPanels(qs []panelQuery) int {
	seen := map[string]bool{}
	for _, q := range qs {
		seen[q.panel] = true
	}
	return len(seen)
}

// scrape returns the worker's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitScraped waits until Prometheus has scraped the worker once.
func waitScraped(t *testing.T, prom *promServer, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		if res, err := prom.query(`asynqlock_task_promotions_total`); err == nil && len(res) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus has not scraped the worker within %v", limit)
		}
	}
}
