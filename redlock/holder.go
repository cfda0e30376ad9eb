package redlock

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Holder says who holds a lock: the process (host name and process id) and
// what in it holds the lock (a task, a job), never anything secret. It
// travels inside the lock's value, after the random part of the token, so an
// operator reads it with Inspect (NodeState.Holder) and the lock costs no
// extra round trip. ContextWithHolder names it.
type Holder struct {
	Host string `json:"host"`           // the holder process's host name
	PID  int    `json:"pid"`            // the holder process's id
	Name string `json:"name,omitempty"` // what holds the lock, e.g. a task type and id or a job name
}

// String renders the holder for people: "name (host pid 123)".
func (h Holder) String() string {
	proc := h.Host
	if h.PID > 0 {
		proc += " pid " + strconv.Itoa(h.PID)
	}
	switch proc = strings.TrimSpace(proc); {
	case h.Name == "":
		return proc
	case proc == "":
		return h.Name
	}
	return h.Name + " (" + proc + ")"
}

const (
	holderSep     = "|" // after a token's random part (rand.Text's base32, which has no '|')
	maxHolderName = 100 // bytes of a name kept: it is sent with every call
)

// parseHolder reads the holder in a lock token, false for none (another
// Redlock implementation's).
func parseHolder(token string) (Holder, bool) {
	_, desc, ok := strings.Cut(token, holderSep)
	if !ok {
		return Holder{}, false
	}
	v, err := url.ParseQuery(desc)
	if err != nil {
		return Holder{}, false
	}
	h := Holder{Host: v.Get("h"), Name: v.Get("n")}
	h.PID, _ = strconv.Atoi(v.Get("p"))
	return h, h != (Holder{})
}

// processHolder is the part of every token naming this process: "|h=host&p=pid".
func processHolder() string {
	host, _ := os.Hostname() // "" when unknown
	return holderSep + "h=" + url.QueryEscape(host) + "&p=" + strconv.Itoa(os.Getpid())
}

// holderSuffix is what follows the random part of this acquisition's tokens.
func (c *Client) holderSuffix(ctx context.Context) string {
	if !c.cfg.holderInfo {
		return ""
	}
	name, _ := ctx.Value(holderKey{}).(string)
	if name == "" {
		return c.procHolder
	}
	return c.procHolder + "&n=" + url.QueryEscape(truncateName(name))
}

// newToken is a fresh token: at least 128 random bits, then the holder.
func newToken(suffix string) string { return rand.Text() + suffix }

// truncateName cuts name to maxHolderName bytes on a rune boundary.
func truncateName(name string) string {
	if len(name) <= maxHolderName {
		return name
	}
	cut := maxHolderName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

type holderKey struct{}

// ContextWithHolder returns a context whose acquisitions name their holder
// (Holder.Name), e.g. a task type and id or a job name; the host and process
// id are always recorded. It lets code that runs a handler (an asynq server,
// a cron runner) name what holds the lock without reaching into the code
// that takes it. Names longer than 100 bytes are cut; never put a secret in
// one: anyone who can read the lock nodes can read it.
func ContextWithHolder(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, holderKey{}, name)
}
