package embedded_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/redlocktest/embedded"
	"github.com/redis/go-redis/v9"
)

// TestLockNodeCheckFindsNothingToWarnAbout: redlock's Check, which the
// worker's node check and `asynqlock check` run, learns each embedded node's
// identity and settings and has no warning about them (the demo printed one
// per node and check before), and tells the nodes apart by run_id.
func TestLockNodeCheckFindsNothingToWarnAbout(t *testing.T) {
	urls, stop, err := embedded.StartN(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	// A generous node timeout: this is not about speed, and -race on a
	// loaded machine is slow.
	c, err := redlock.NewFromURLs(urls, redlock.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reports, err := c.Admin().Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range reports {
		if r.Err != nil || r.ConfigErr != nil {
			t.Fatalf("node %d: err %v, config err %v", r.Node, r.Err, r.ConfigErr)
		}
		if w := r.Warnings; len(w) != 0 {
			t.Errorf("node %d warns: %q", r.Node, w)
		}
		if len(r.RunID) != 40 || !strings.HasPrefix(r.Version, "miniredis") {
			t.Errorf("node %d: run_id %q, version %q", r.Node, r.RunID, r.Version)
		}
		ids[r.RunID] = true
		if r.MaxmemoryPolicy != "noeviction" || r.Maxmemory != 0 || !r.AppendOnly || r.AppendFsync != "always" {
			t.Errorf("node %d settings: %+v", r.Node, r)
		}
	}
	if len(ids) != len(urls) {
		t.Errorf("run_ids %v: want %d distinct", ids, len(urls))
	}
}

// TestInfoAndConfigAnswers checks the replies themselves, over RESP2 and
// RESP3: the sections asked for, miniredis's own refusal of an unknown one,
// CONFIG GET with several glob patterns, and the refusal of CONFIG SET.
func TestInfoAndConfigAnswers(t *testing.T) {
	s := embedded.StartT(t)
	for _, proto := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: proto, MaxRetries: -1, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := c.Info(ctx, "server").Result()
		if err != nil || !strings.Contains(info, "run_id:") || strings.Contains(info, "# Clients") {
			t.Fatalf("RESP%d INFO server = %q, %v", proto, info, err)
		}
		all, err := c.Info(ctx).Result()
		for _, want := range []string{"# Server", "run_id:", "# Clients", "connected_clients:", "# Stats", "cluster_enabled:0"} {
			if err != nil || !strings.Contains(all, want) {
				t.Fatalf("RESP%d INFO = %q, %v; lacks %q", proto, all, err, want)
			}
		}
		if cl, err := c.Info(ctx, "cluster").Result(); err != nil || !strings.Contains(cl, "cluster_enabled:0") {
			t.Fatalf("RESP%d INFO cluster = %q, %v", proto, cl, err)
		}
		if err := c.Info(ctx, "keyspace").Err(); err == nil {
			t.Errorf("RESP%d INFO keyspace: no error; miniredis refuses sections it lacks", proto)
		}
		kv, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil || len(kv) != 2 || kv["maxmemory"] != "0" || kv["maxmemory-policy"] != "noeviction" {
			t.Fatalf("RESP%d CONFIG GET maxmemory* = %v, %v", proto, kv, err)
		}
		if kv, err := c.Do(ctx, "CONFIG", "GET", "appendonly", "APPENDFSYNC").Result(); err != nil || !strings.Contains(fmtAny(kv), "always") {
			t.Fatalf("RESP%d CONFIG GET appendonly APPENDFSYNC = %v, %v", proto, kv, err)
		}
		if err := c.ConfigSet(ctx, "maxmemory", "1mb").Err(); err == nil {
			t.Errorf("RESP%d CONFIG SET accepted", proto)
		}
	}
	// The same server answers with the same identity every time.
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	a, _ := c.Info(context.Background(), "server").Result()
	b, _ := c.Info(context.Background(), "server").Result()
	if a != b {
		t.Errorf("INFO server changed between two calls:\n%s\n%s", a, b)
	}
}

func fmtAny(v any) string {
	var b strings.Builder
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			b.WriteString(fmtAny(e) + " ")
		}
	case map[any]any:
		for k, e := range v {
			b.WriteString(fmtAny(k) + "=" + fmtAny(e) + " ")
		}
	case string:
		b.WriteString(v)
	}
	return b.String()
}

// TestInfoWhileClosing asks INFO from several connections while the server
// closes: an answer or a connection error, never a crash (the INFO hook read
// miniredis's server field, which Close clears, and panicked on nil) or a
// race (run with -race).
func TestInfoWhileClosing(t *testing.T) {
	for range 10 {
		s := embedded.StartT(t)
		var wg sync.WaitGroup
		for range 4 {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DisableIdentity: true})
			t.Cleanup(func() { _ = c.Close() })
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for range 200 {
					if err := c.Info(ctx).Err(); err != nil {
						return
					}
				}
			})
		}
		time.Sleep(time.Millisecond)
		s.Close()
		wg.Wait()
	}
}
