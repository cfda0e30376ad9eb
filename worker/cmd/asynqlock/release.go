package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

func releaseFlags(fs *flag.FlagSet) any {
	return fs.Bool("yes", false, "release without asking")
}

// errNotHeld is a release of a lock that no node holds.
var errNotHeld = errors.New("nothing released")

// errNotConfirmed is a release the operator did not confirm.
var errNotConfirmed = errors.New("not confirmed: nothing released")

// runRelease force-releases a resource: it shows who holds it, asks (unless
// --yes), then deletes on every node exactly the tokens it showed, so a lock
// that changed hands meanwhile is left alone.
func runRelease(ctx context.Context, a *app, flags any, args []string) error {
	res := args[0]
	states, err := a.locks.Inspect(ctx, res)
	if err != nil {
		return err
	}
	groups := lockadmin.Claims(states)
	if len(groups) == 0 {
		fmt.Fprintf(a.out, "%s: not held on any node that answered; nothing to release\n", res)
		return fmt.Errorf("%w: %q is not held under key prefix %q on any node that answered (check the name and REDLOCK_PREFIX)", errNotHeld, res, a.prefix)
	}
	for _, g := range groups {
		fmt.Fprintf(a.out, "%s: held by %s on %s, TTL %s\n", res, claimHolder(g), nodeList(g.Nodes, len(states)), ttlText(g.TTL))
	}
	if !*flags.(*bool) {
		fmt.Fprintf(a.out, "Force-release %s? The holder keeps running until its next extension fails. [y/N] ", res)
		answer, _ := bufio.NewReader(a.in).ReadString('\n')
		if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
			fmt.Fprintln(a.out)
			return errNotConfirmed
		}
	}
	var errs []error
	for _, g := range groups {
		n, err := lockadmin.ForceRelease(ctx, a.locks, res, g.Token)
		attrs := []any{"resource", res, "holder", claimHolder(g), "token", shortToken(g.Token), "nodes_released", n, "operator", operator()}
		if err != nil {
			attrs = append(attrs, "err", err) // not err=<nil> after every release that worked
		}
		a.log.Warn("lock force-released", attrs...)
		fmt.Fprintf(a.out, "%s: released %s on %d node(s)\n", res, claimHolder(g), n)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// operator names who ran the command, for the log.
func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
