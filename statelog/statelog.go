// Package statelog logs a failing state once: its first failure at Warn (or
// Error), its end once at Info, the repeats between them at Debug. A node
// down for an hour, or a job failing every tick, makes two lines. A state
// ends only at a success a settle time after its last failure, so that a
// node that fails one call and serves the next makes one Warn, not Warn and
// Info pairs milliseconds apart. Every package of asynqlock that logs a
// state of its nodes, jobs or dependencies does it through a State; it is
// public so that the worker module, and an application that logs its own
// checks beside asynqlock's, follow the same rule.
package statelog

import (
	"context"
	"log/slog"
	"regexp"
	"sync"
	"time"
)

// Settle is the usual settle time: how long a failing state must see no
// failure before a success ends it.
const Settle = 5 * time.Second

// State is one thing that fails and recovers (a node, a kind of call, a
// job). Its zero value is healthy, with no settle time. It is safe for
// concurrent use.
type State struct {
	// Settle is how long after the last failure a success ends the state.
	Settle time.Duration

	mu       sync.Mutex
	failing  string    // the message of the failure logged; "" while healthy
	lastFail time.Time // the last failure, by the monotonic clock
	repeats  int       // failures since the one logged
}

// Fail reports a failure and its cause: logged at lvl with args (an
// address, never a password: credentials in URLs are removed) when s was
// healthy or failed with another message, else at Debug. It returns
// whether the state changed; a nil log only records the failure (for a
// caller that passes on a line of its own).
func (s *State) Fail(log *slog.Logger, lvl slog.Level, msg string, err error, args ...any) bool {
	s.mu.Lock()
	changed := s.failing != msg
	if changed {
		s.failing, s.repeats = msg, 0
	} else {
		s.repeats++
	}
	s.lastFail = time.Now()
	s.mu.Unlock()
	if log == nil {
		return changed
	}
	if !changed {
		lvl = slog.LevelDebug
	}
	if err != nil {
		args = append(args, "err", err)
	}
	log.Log(context.Background(), lvl, msg, clean(args)...)
	return changed
}

// OK reports a success. When it ends a failing state (Settle after its
// last failure), it logs msg at Info once with args, the failure it ends
// ("after") and the failures repeated since it was logged ("repeats"), and
// returns true. A nil log ends the state silently.
func (s *State) OK(log *slog.Logger, msg string, args ...any) bool {
	s.mu.Lock()
	prev, repeats := s.failing, s.repeats
	ends := prev != "" && time.Since(s.lastFail) >= s.Settle
	if ends {
		s.failing, s.repeats = "", 0
	}
	s.mu.Unlock()
	if ends && log != nil {
		log.Info(msg, clean(append(args, "after", prev, "repeats", repeats))...)
	}
	return ends
}

// Failing returns the message of the failure s is in, "" if healthy.
func (s *State) Failing() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// userinfo is the credentials part of a URL: scheme://user:password@.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@`)

// clean removes credentials from the string and error values of args.
func clean(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			a = userinfo.ReplaceAllString(v, "$1")
		case error:
			if t := v.Error(); userinfo.MatchString(t) {
				a = userinfo.ReplaceAllString(t, "$1")
			}
		}
		out[i] = a
	}
	return out
}
