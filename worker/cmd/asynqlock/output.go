package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// nodeJSON is one node's view of a resource in --json output.
type nodeJSON struct {
	Node   int             `json:"node"`
	Addr   string          `json:"addr"`
	Held   bool            `json:"held"`
	Token  string          `json:"token,omitempty"` // its first 8 characters, as the tables show
	Holder *redlock.Holder `json:"holder,omitempty"`
	TTLMs  int64           `json:"ttl_ms,omitempty"`
	Fence  int64           `json:"fence,omitempty"`
	Slot   *int            `json:"slot,omitempty"`  // under a limit: which slot this state describes
	Limit  int             `json:"limit,omitempty"` // one more than the highest slot held on any node, when slots above 0 are
	Error  string          `json:"error,omitempty"`
}

// lockJSON is one resource in --json output.
type lockJSON struct {
	Resource string     `json:"resource"`
	Nodes    []nodeJSON `json:"nodes"`
}

func toLockJSON(resource string, states []redlock.NodeState) lockJSON {
	l := lockJSON{Resource: resource, Nodes: make([]nodeJSON, len(states))}
	for i, s := range states {
		n := nodeJSON{Node: s.Node, Addr: s.Addr, Held: s.Token != "", TTLMs: s.TTL.Milliseconds(), Fence: s.Fence}
		if s.Limit > 1 {
			n.Slot, n.Limit = &s.Slot, s.Limit
		}
		if s.Token != "" {
			n.Token = shortToken(s.Token) // a full token lets its bearer extend or release the lock
		}
		if h := s.Holder; h != (redlock.Holder{}) {
			n.Holder = &h
		}
		if s.Err != nil {
			n.Error = s.Err.Error()
		}
		l.Nodes[i] = n
	}
	return l
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// claimHolder is a claim's holder for people.
func claimHolder(c lockadmin.Claim) string { return holderOf(c.Holder, c.Token) }

// holderOf is the holder h of token for people, or a short token when the
// token names none.
func holderOf(h redlock.Holder, token string) string {
	if s := h.String(); s != "" {
		return s
	}
	return "token " + shortToken(token)
}

// shortToken is the first characters of the random part: enough to tell
// holders apart.
func shortToken(tok string) string {
	r, _, _ := strings.Cut(tok, "|")
	if len(r) > 8 {
		r = r[:8]
	}
	return r
}

func nodeList(nodes []int, total int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("%d/%d (%s)", len(nodes), total, strings.Join(s, ","))
}

func fenceText(f int64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatInt(f, 10)
}

func ttlText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
