package workerconfig

import (
	"net/url"
	"strings"

	"github.com/asynqlock/asynqlock/redisurl"
)

// TLSFiles are the TLS files given by environment variables (a CA, a client
// certificate and its key), used by the rediss URLs that name none.
type TLSFiles struct{ CA, Cert, Key string }

// WithTLSDefaults adds to a rediss URL each of the files that the URL does
// not name itself; other URLs are returned as they are.
func WithTLSDefaults(raw string, f TLSFiles) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || !strings.HasPrefix(u.Scheme, "rediss") || f == (TLSFiles{}) {
		return raw
	}
	q := u.Query()
	for p, v := range map[string]string{redisurl.ParamTLSCAFile: f.CA, redisurl.ParamTLSCertFile: f.Cert, redisurl.ParamTLSKeyFile: f.Key} {
		if v != "" && !q.Has(p) {
			q.Set(p, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
