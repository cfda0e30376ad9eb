package workerconfig

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// Locks is the lock client's part of the configuration (REDLOCK_*).
type Locks struct {
	Nodes       []string // REDLOCK_NODES, as given
	TLS         TLSFiles // REDLOCK_TLS_*
	NodeTimeout time.Duration
	DriftFactor float64
	Prefix      string
}

// NodeURLs are the node URLs with the TLS files added.
func (l Locks) NodeURLs() []string {
	urls := make([]string, len(l.Nodes))
	for i, u := range l.Nodes {
		urls[i] = WithTLSDefaults(u, l.TLS)
	}
	return urls
}

// NewClient builds the lock client the workers use: its node timeout, drift
// factor and key prefix, then opts. A node URL it cannot use is an *Error
// naming REDLOCK_NODES.
func (l Locks) NewClient(opts ...redlock.Option) (*redlock.Client, error) {
	all := append([]redlock.Option{
		redlock.WithNodeTimeout(l.NodeTimeout),
		redlock.WithDriftFactor(l.DriftFactor),
		redlock.WithPrefix(l.Prefix),
	}, opts...)
	c, err := redlock.NewFromURLs(l.NodeURLs(), all...)
	if err != nil {
		return nil, &Error{Problems: []Problem{{"REDLOCK_NODES", err.Error()}}, Cause: err}
	}
	return c, nil
}

// Names are the node URLs as they may be shown: passwords masked, by node
// index. Two spellings of one server differ here while their addresses may
// not (two databases of one server).
func (l Locks) Names() []string {
	out := make([]string, len(l.Nodes))
	for i, raw := range l.Nodes {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			out[i] = fmt.Sprintf("node %d URL (unparsable)", i)
			continue
		}
		out[i] = u.Redacted()
	}
	return out
}
