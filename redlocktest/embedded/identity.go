package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"runtime/debug"
	"strings"

	"github.com/alicebob/miniredis/v2/server"
)

// What an embedded server answers to the questions lock-node checks ask
// (redlock's Client.Check, the worker's node check, `asynqlock check`).
// miniredis answers neither INFO server nor CONFIG GET, so every check of an
// embedded node ended in "identity or settings unknown", a warning about the
// demo's own setup rather than about anything a user can change.

// settings are the CONFIG GET answers. They are what an embedded server
// does, in the terms the checks use:
//   - maxmemory 0, noeviction: it never evicts a key.
//   - appendonly yes, appendfsync always: the checks ask this to know
//     whether the node may rejoin at once after a crash (Redlock's
//     delayed-restart rule: a node that lost acknowledged writes must stay
//     down for the largest TTL). An embedded server has no disk, but it
//     cannot lose writes and rejoin either: it lives in its process's memory
//     and, once closed, never answers at its address again (a new Start
//     takes a new port and a new run_id). Either it answers with every write
//     it acknowledged or it never answers again, which is what a server with
//     appendfsync always guarantees for the rule; "no" would make every check
//     ask the user to change a setting that does not exist here.
var settings = [][2]string{
	{"maxmemory", "0"},
	{"maxmemory-policy", "noeviction"},
	{"appendonly", "yes"},
	{"appendfsync", "always"},
	{"save", ""},
	{"databases", "16"},
	{"cluster-enabled", "no"},
}

// newRunID returns a random 40-hex-digit server identity, as redis-server
// draws one at each start: checks tell servers apart by it, and a node whose
// run_id changed is reported as restarted.
func newRunID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// miniredisVersion is the miniredis module version this binary was built
// with, shown as the server's version so that nobody mistakes an embedded
// node for a redis-server.
func miniredisVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/alicebob/miniredis/v2" {
				return "miniredis-" + strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "miniredis"
}

// infoSection renders the INFO sections miniredis lacks (server, cluster)
// and the two it has (clients, stats), in redis-server's format.
func (s *Server) infoSection(name string) (string, bool) {
	srv := s.srv.Load()
	switch name {
	case "server":
		return fmt.Sprintf("# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nprocess_id:%d\r\nrun_id:%s\r\ntcp_port:%d\r\nexecutable:embedded in-process (asynqlock redlocktest/embedded)\r\n",
			s.version, os.Getpid(), s.runID, s.port), true
	case "clients":
		return fmt.Sprintf("# Clients\r\nconnected_clients:%d\r\n", srv.ClientsLen()), true
	case "stats":
		return fmt.Sprintf("# Stats\r\ntotal_connections_received:%d\r\ntotal_commands_processed:%d\r\n", srv.TotalConnections(), srv.TotalCommands()), true
	case "cluster":
		return "# Cluster\r\ncluster_enabled:0\r\n", true
	}
	return "", false
}

// info answers INFO with no section, or with sections all known to
// infoSection; it leaves anything else to miniredis (which refuses an
// unknown section). It runs as the server's pre-hook, before miniredis's
// dispatch: INFO is registered by miniredis and cannot be registered again.
func (s *Server) info(c *server.Peer, cmd string, args ...string) bool {
	if cmd != "INFO" {
		return false
	}
	names := args
	if len(names) == 0 || len(names) == 1 && isDefaultSection(names[0]) {
		names = []string{"server", "clients", "stats", "cluster"}
	}
	var b strings.Builder
	for i, n := range names {
		sec, ok := s.infoSection(strings.ToLower(n))
		if !ok {
			return false
		}
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(sec)
	}
	c.WriteBulk(b.String())
	return true
}

func isDefaultSection(name string) bool {
	switch strings.ToLower(name) {
	case "default", "all", "everything":
		return true
	}
	return false
}

// config answers CONFIG GET pattern... from settings (glob patterns, as
// redis-server) and refuses every other subcommand: nothing here can be
// configured.
func (s *Server) config(c *server.Peer, cmd string, args []string) {
	if len(args) < 2 || !strings.EqualFold(args[0], "GET") {
		c.WriteError("ERR embedded server: only CONFIG GET <pattern>... is supported")
		return
	}
	var kv [][2]string
	for _, setting := range settings {
		for _, p := range args[1:] {
			if ok, _ := path.Match(strings.ToLower(p), setting[0]); ok {
				kv = append(kv, setting)
				break
			}
		}
	}
	c.WriteMapLen(len(kv))
	for _, e := range kv {
		c.WriteBulk(e[0])
		c.WriteBulk(e[1])
	}
}
