package workerconfig

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/statelog"
)

// OnceQuiet is how long a line of a dependency must stay away before it is
// logged again: a failure that stopped repeating for that long has changed
// state without anyone noticing (Forget says so at once when someone does).
const OnceQuiet = 10 * time.Minute

// onceLimit bounds the lines remembered; past it, the oldest are dropped.
const onceLimit = 1000

// Once keeps the dependencies' log lines (go-redis's, asynq's, the log
// package's) to the module's rule: a line is logged once per change of
// state. A line that repeats (go-redis's failed dial twice a second while a
// node is down, asynq's dequeue error per poll) is dropped until it has
// stayed away for OnceQuiet or Forget says that what it reports is over (the
// worker calls Forget with a node's address when the node answers again).
// Lines are compared by source and text, with the parts that change at every
// repeat (connection numbers, attempt counts, task IDs, durations) masked.
// Its zero value is not usable; NewOnce makes one. It is safe for concurrent
// use.
type Once struct {
	mu      sync.Mutex
	quiet   time.Duration
	seen    map[string]*onceLine
	dropped map[string]int // lines not logged, per source
}

// onceLine is a line logged: its state of the statelog rule.
type onceLine struct {
	source, text string
	last         time.Time // when it was last seen, logged or not
	state        statelog.State
}

// NewOnce returns an empty Once whose lines return after quiet (OnceQuiet
// when quiet <= 0).
func NewOnce(quiet time.Duration) *Once {
	if quiet <= 0 {
		quiet = OnceQuiet
	}
	return &Once{quiet: quiet, seen: map[string]*onceLine{}, dropped: map[string]int{}}
}

// Logger returns a logger writing to l's handler the lines of source that
// are new, each with the attribute component=source.
func (o *Once) Logger(l *slog.Logger, source string) *slog.Logger {
	return slog.New(&onceHandler{next: l.Handler(), once: o, source: source}).With("component", source)
}

// Forget lets the lines that mention s (an address) be logged again: what
// they reported is over.
func (o *Once) Forget(s string) {
	o.forget(func(l *onceLine) bool { return s != "" && strings.Contains(l.text, s) })
}

// ForgetSource lets every line of source be logged again.
func (o *Once) ForgetSource(source string) {
	o.forget(func(l *onceLine) bool { return l.source == source })
}

func (o *Once) forget(match func(*onceLine) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.seen {
		if match(l) {
			l.state.OK(nil, "")
		}
	}
}

// Dropped returns how many lines of source were repeats, not logged.
func (o *Once) Dropped(source string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped[source]
}

// admit reports whether a line is new: each masked line is a
// statelog.State (its repeats are no change), which ends when Forget says
// so or when the line has stayed away for the quiet time.
func (o *Once) admit(source, text string, t time.Time) bool {
	key := source + "\x00" + mask(text)
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.seen[key]
	switch {
	case l == nil:
		if len(o.seen) >= onceLimit {
			o.dropOldest()
		}
		l = &onceLine{source: source, text: text}
		o.seen[key] = l
	case t.Sub(l.last) >= o.quiet:
		l.state.OK(nil, "")
	}
	l.last = t
	if !l.state.Fail(nil, slog.LevelWarn, key, nil) {
		o.dropped[source]++
		return false
	}
	return true
}

// dropOldest forgets the line seen longest ago.
func (o *Once) dropOldest() {
	var oldest string
	var at time.Time
	for k, l := range o.seen {
		if oldest == "" || l.last.Before(at) {
			oldest, at = k, l.last
		}
	}
	delete(o.seen, oldest)
}

// masks are the parts of a line that change at every repeat of the same
// state.
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`conn\[\d+\]`), "conn[#]"},
	{regexp.MustCompile(`after \d+ attempts`), "after # attempts"},
	{regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`), "<id>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`), "<duration>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?`), "<time>"},
}

// mask replaces the parts of a line that change at every repeat.
func mask(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

// onceHandler passes on the records Once admits.
type onceHandler struct {
	next   slog.Handler
	once   *Once
	source string
}

func (h *onceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *onceHandler) Handle(ctx context.Context, r slog.Record) error {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	if !h.once.admit(h.source, r.Message, t) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *onceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &onceHandler{next: h.next.WithAttrs(as), once: h.once, source: h.source}
}

func (h *onceHandler) WithGroup(name string) slog.Handler {
	return &onceHandler{next: h.next.WithGroup(name), once: h.once, source: h.source}
}

// RedisLog routes go-redis's process-wide log lines (redis.SetLogger:
// failed dials, Sentinel master changes) to L, so that LOG_FORMAT applies to
// them too; give it a Once logger to keep them to one per change. go-redis
// does not give its lines a level: those that report a failure are Warn,
// the others Info, unless Debug is set.
type RedisLog struct {
	L *slog.Logger
	// Debug logs every line at Debug: for a caller that reports the
	// failures go-redis logs (a failed dial) itself, as the operator
	// command does, where they would be said twice.
	Debug bool
}

// Printf logs one go-redis line.
func (r RedisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	lvl := failureLevel(msg)
	if r.Debug {
		lvl = slog.LevelDebug
	}
	r.L.Log(ctx, lvl, msg)
}

// LineWriter is an io.Writer for the log package (log.SetOutput): each
// write is one line, logged to L at the level its text suggests.
type LineWriter struct{ L *slog.Logger }

// Write logs p as one line.
func (w LineWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	w.L.Log(context.Background(), failureLevel(msg), msg)
	return len(p), nil
}

// failureLevel is Warn for a line that reports a failure, Info otherwise.
func failureLevel(msg string) slog.Level {
	l := strings.ToLower(msg)
	for _, w := range []string{"fail", "error", "panic", "refused", "timeout", "denied"} {
		if strings.Contains(l, w) {
			return slog.LevelWarn
		}
	}
	return slog.LevelInfo
}
