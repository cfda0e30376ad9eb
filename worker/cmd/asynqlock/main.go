// Command asynqlock is the operator's tool for the lock nodes of asynqlock
// workers: it lists held locks with their holders, shows one resource, force
// releases a stuck lock and checks the nodes (reachability, identity,
// settings, clocks).
//
// It reads the same environment variables as the worker (REDLOCK_NODES,
// REDLOCK_PREFIX, REDLOCK_NODE_TIMEOUT, LOG_LEVEL, ...); the broker's are not
// needed.
//
//	asynqlock list [--json] [resource-prefix]
//	asynqlock show [--json] <resource>
//	asynqlock release [--yes] <resource>
//	asynqlock check [--json]
//
// The common flag --nodes gives the lock node URLs instead of REDLOCK_NODES.
//
// Exit status: 0 on success, 1 when the command failed or found a problem
// (a node down, misconfigured or able to evict lock keys, a clock far off,
// two nodes that are one server, a release of a lock that is not held,
// refused or not confirmed), 2 for bad usage or configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker"
	"github.com/asynqlock/asynqlock/worker/internal/workerconfig"
	"github.com/redis/go-redis/v9"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	usageString = `usage: asynqlock <command> [flags] [args]

commands:
  list [--json] [--limit N] [resource-prefix]  held locks, their holders, TTL and fence per node
  show [--json] <resource>                       one resource on every node
  release [--yes] <resource>                     force-release a lock (asks first unless --yes)
  check [--json]                                 reachability, identity, settings and clocks of the nodes

common flags:
  --timeout d      bound of the whole command (default 30s)
  --nodes urls     lock node URLs, comma-separated (default: REDLOCK_NODES)

The lock nodes and key prefix come from the worker's environment variables
(REDLOCK_NODES, REDLOCK_PREFIX, REDLOCK_NODE_TIMEOUT, LOG_LEVEL, LOG_FORMAT).
`
)

// errUsage marks bad command-line usage.
var errUsage = errors.New("bad usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// app is one invocation: its streams, logger and lock client.
type app struct {
	in       io.Reader
	out, err io.Writer
	log      *slog.Logger
	locks    *redlock.Client
	names    []string // node URLs, passwords masked
	prefix   string   // the key prefix (REDLOCK_PREFIX)
	json     bool
}

// run executes one command and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usageString)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "asynqlock: unknown command %q\n\n%s", args[0], usageString)
		return exitUsage
	}
	fs := flag.NewFlagSet("asynqlock "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "bound of the whole command")
	nodes := fs.String("nodes", "", "lock node URLs, comma-separated (default: REDLOCK_NODES)")
	a := &app{in: stdin, out: stdout, err: stderr}
	fs.BoolVar(&a.json, "json", false, "print JSON instead of a table")
	flags := cmd.flags(fs)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return exitUsage
	}
	if len(pos) < cmd.minArgs || len(pos) > cmd.maxArgs {
		fmt.Fprintf(stderr, "asynqlock %s: want %s\n", args[0], cmd.args)
		return exitUsage
	}
	// The worker's environment, of which only the lock variables matter.
	cfg, err := worker.LoadConfigFrom(environ(*nodes))
	if err = workerconfig.Only(err, "REDLOCK_", "LOG_"); err != nil {
		fmt.Fprintf(stderr, "asynqlock: %v\n", err)
		return exitUsage
	}
	a.log = newLogger(cfg, stderr)
	a.prefix = cfg.LockPrefix
	// go-redis's own lines (a failed dial per call to a dead node) at
	// Debug, once each: every command reports the nodes it could not reach
	// itself (check's DOWN rows, list's "not scanned", release's "on any
	// node that answered").
	redis.SetLogger(workerconfig.RedisLog{L: workerconfig.NewOnce(0).Logger(a.log, "go-redis"), Debug: true})
	if a.locks, a.names, err = lockClient(cfg, a.log); err != nil {
		fmt.Fprintf(stderr, "asynqlock: %v\n", err)
		return exitUsage
	}
	defer a.locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := cmd.run(ctx, a, flags, pos); err != nil {
		fmt.Fprintf(stderr, "asynqlock %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return exitUsage
		}
		return exitFailed
	}
	return exitOK
}

// environ is the process environment, with REDLOCK_NODES replaced by nodes
// when it is given (--nodes).
func environ(nodes string) map[string]string {
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	if nodes != "" {
		vars["REDLOCK_NODES"] = nodes
	}
	return vars
}

// command is one subcommand.
type command struct {
	args             string // positional arguments, for the usage message
	minArgs, maxArgs int
	// flags defines the command's own flags and returns what run receives.
	flags func(fs *flag.FlagSet) any
	run   func(ctx context.Context, a *app, flags any, args []string) error
}

var commands = map[string]command{
	"list":    {args: "at most one resource prefix", maxArgs: 1, flags: listFlags, run: runList},
	"show":    {args: "one resource", minArgs: 1, maxArgs: 1, flags: noFlags, run: runShow},
	"release": {args: "one resource", minArgs: 1, maxArgs: 1, flags: releaseFlags, run: runRelease},
	"check":   {args: "no arguments", flags: noFlags, run: runCheck},
}

func noFlags(*flag.FlagSet) any { return nil }

// parseInterleaved parses flags wherever they appear among the positional
// arguments ("show sku-1 --json" as well as "show --json sku-1"); "--" ends
// the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// lockClient is a lock client as the workers' (they see the same locks),
// with the node URLs as they may be shown (passwords masked).
func lockClient(cfg worker.Config, log *slog.Logger) (*redlock.Client, []string, error) {
	lc := workerconfig.Locks{Nodes: cfg.RedlockNodes, NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor, Prefix: cfg.LockPrefix,
		TLS: workerconfig.TLSFiles{CA: cfg.RedlockTLSCAFile, Cert: cfg.RedlockTLSCertFile, Key: cfg.RedlockTLSKeyFile}}
	// An operator's reads are not latency-bound: give remote nodes time.
	// Nodes a worker would refuse (one server twice, a wrong password) are
	// kept: the commands report them.
	c, err := lc.NewClient(redlock.WithLogger(log), redlock.WithNodeTimeout(max(cfg.NodeTimeout, time.Second)), redlock.WithInspectOnly())
	return c, lc.Names(), err
}

// newLogger logs as the worker does (LOG_LEVEL, LOG_FORMAT) but to w, at
// Warn unless LOG_LEVEL says otherwise: the output is for the command's
// results.
func newLogger(cfg worker.Config, w io.Writer) *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("LOG_LEVEL") != "" {
		_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
