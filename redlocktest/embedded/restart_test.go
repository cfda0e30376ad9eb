package embedded

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRestartKeepsKeysOnTheSameAddress: after Stop clients are refused;
// after Restart the same client reaches the server on its address, finds
// its keys (TTLs still running), and the server still answers as a
// redis-server (INFO server with its run_id, CONFIG GET) and serves a
// blocking command.
func TestRestartKeepsKeysOnTheSameAddress(t *testing.T) {
	t.Parallel()
	s := StartT(t)
	c, ctx := client(t, s)
	if err := c.Set(ctx, "stock", 7, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered while stopped")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "stock").Int(); err != nil || got != 7 {
		t.Fatalf("GET after Restart = %d, %v; want 7", got, err)
	}
	if ttl, err := c.TTL(ctx, "stock").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("TTL after Restart = %v, %v", ttl, err)
	}
	again, err := c.Info(ctx, "server").Result()
	if err != nil || again != info {
		t.Errorf("INFO server after Restart = %q, %v; want %q", again, err, info)
	}
	if cfg, err := c.ConfigGet(ctx, "appendonly").Result(); err != nil || len(cfg) != 1 {
		t.Errorf("CONFIG GET after Restart = %v, %v", cfg, err)
	}
	if err := c.BLPop(ctx, 50*time.Millisecond, "empty").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("BLPOP 50ms on an empty list after Restart: %v; want redis.Nil", err)
	}
}

func TestRestartRefusedUnlessStopped(t *testing.T) {
	t.Parallel()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err == nil || !strings.Contains(err.Error(), "Stop it first") {
		t.Errorf("Restart of a running server: %v", err)
	}
	s.Stop()
	s.Close()
	s.Stop()
	if err := s.Restart(); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("Restart after Close: %v", err)
	}
}
