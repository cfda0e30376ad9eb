// Package redisurl parses the Redis URLs that redlock.NewFromURLs and the
// worker accept (lock nodes: redis://, rediss://, redis-cluster://,
// rediss-cluster://; TLS files as URL parameters), for programs that build
// other clients, such as their asynq broker, from the same configuration:
// errors that say what is wrong without quoting a password, redacted forms
// for logs, and the check that a given password is used at all.
package redisurl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TLS parameters a rediss:// URL may carry besides go-redis's own
// (skip_verify): a private CA and an optional client certificate.
const (
	ParamTLSCAFile   = "tls_ca_file"   // PEM file of the CA(s) that sign the server certificate
	ParamTLSCertFile = "tls_cert_file" // PEM client certificate, with tls_key_file
	ParamTLSKeyFile  = "tls_key_file"  // PEM key of the client certificate
)

// Parse parses a Redis URL of any scheme. Unlike url.Parse, its
// errors say what is wrong (no scheme, a bad port, user info that needs
// percent-encoding) without quoting any part of the user info, so they can be
// logged.
func Parse(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" {
		return nil, errors.New("URL has no scheme; expected e.g. redis://host:6379")
	}
	u, err := url.Parse(raw)
	if err == nil && strings.Contains(u.Host, "@") || strings.ContainsAny(rest, "#") {
		err = errUserInfo // '@' or '#' unescaped in the password
	} else if err == nil && strings.Contains(u.EscapedPath()+u.RawQuery, "@") {
		err = errUserInfo // a '/' or '?' in the password cut the authority
	}
	if err == nil {
		if u.Host == "" {
			return nil, fmt.Errorf("URL %q has no host", Redact(u))
		}
		err = checkPorts(u.Host)
		if err != nil {
			return nil, fmt.Errorf("URL %q: %w", Redact(u), err)
		}
		return u, nil
	}
	// What follows the last '@' of the authority is host:port, never a
	// secret: if it is well formed, the user info is what broke the parse.
	// After a '?' that '@' may be in the query, next to a password parameter:
	// then nothing is quoted.
	hosts := rest
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if strings.Contains(rest[:at], "?") {
			return nil, errUserInfo
		}
		hosts = rest[at+1:]
	}
	if i := strings.IndexAny(hosts, "/?#"); i >= 0 {
		hosts = hosts[:i]
	}
	if perr := checkPorts(hosts); perr != nil {
		return nil, fmt.Errorf("URL %s://…%s: %w", scheme, hosts, perr)
	}
	return nil, errUserInfo
}

var errUserInfo = errors.New("URL cannot be parsed: percent-encode the characters / ? # @ % : in the user, the password and the password parameter")

// Redact is u.Redacted with the password query parameter (go-redis's
// form for a Sentinel-managed master's password) masked as well.
func Redact(u *url.URL) string {
	q := u.Query()
	if !q.Has("password") {
		return u.Redacted()
	}
	q.Set("password", "xxxxx")
	c := *u
	c.RawQuery = q.Encode()
	return c.Redacted()
}

// checkPorts checks each comma-separated host:port of an authority.
// A single host may omit its port (the default applies), not one of several.
func checkPorts(hosts string) error {
	several := strings.Contains(hosts, ",")
	for h := range strings.SplitSeq(hosts, ",") {
		_, port, err := net.SplitHostPort(h)
		if err != nil {
			if !several && !strings.Contains(h, ":") {
				continue
			}
			return fmt.Errorf("address %q must be host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q of %q is not a number in 1..65535", port, h)
		}
	}
	return nil
}

// ParseNode parses a redis:// or rediss:// node URL, with go-redis URL
// parameters and, for rediss://, tls_ca_file, tls_cert_file and tls_key_file
// (see AddTLSFiles). Its errors name the real problem and show the URL
// redacted (password replaced by "xxxxx"), so a secret never reaches a log.
func ParseNode(raw string) (*redis.Options, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	shown := Redact(u)
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("URL %q: scheme must be redis:// or rediss:// for a single server, got %q", shown, u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		// go-redis would read "a:1,b:2" as the host "a:1,b": refuse it here.
		return nil, fmt.Errorf("URL %q names several servers; give each node its own URL", shown)
	}
	files := takeTLSFiles(u)
	o, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, goRedisError(u, shown, err)
	}
	if err := files.apply(o.TLSConfig, shown, "rediss://"); err != nil {
		return nil, err
	}
	return o, nil
}

// tlsParams are the TLS file parameters of a URL: CA, certificate, key.
type tlsParams [3]string

// takeTLSFiles removes the TLS file parameters from u, which go-redis does
// not know, and returns them.
func takeTLSFiles(u *url.URL) tlsParams {
	q := u.Query()
	files := tlsParams{q.Get(ParamTLSCAFile), q.Get(ParamTLSCertFile), q.Get(ParamTLSKeyFile)}
	q.Del(ParamTLSCAFile)
	q.Del(ParamTLSCertFile)
	q.Del(ParamTLSKeyFile)
	u.RawQuery = q.Encode()
	return files
}

// apply adds the files to cfg, the TLS configuration go-redis parsed (nil
// without the TLS scheme, which tlsScheme names).
func (f tlsParams) apply(cfg *tls.Config, shown, tlsScheme string) error {
	if f == (tlsParams{}) {
		return nil
	}
	if cfg == nil {
		return fmt.Errorf("URL %q: TLS parameters need the %s scheme", shown, tlsScheme)
	}
	if err := AddTLSFiles(cfg, f[0], f[1], f[2]); err != nil {
		return fmt.Errorf("URL %q: %v", shown, err)
	}
	return nil
}

// goRedisError reports go-redis's parse error of u by its shown form, with
// the password masked should go-redis quote it.
func goRedisError(u *url.URL, shown string, err error) error {
	msg := err.Error()
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return fmt.Errorf("URL %q: %s", shown, msg)
}

// AddTLSFiles completes cfg with a private CA (caFile: the server
// certificate must chain to it instead of the system roots) and a client
// certificate (certFile and keyFile, both or neither). Empty names are
// skipped. Errors name the file and the problem.
func AddTLSFiles(cfg *tls.Config, caFile, certFile, keyFile string) error {
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return fmt.Errorf("a TLS client certificate needs both %s and %s", ParamTLSCertFile, ParamTLSKeyFile)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}
