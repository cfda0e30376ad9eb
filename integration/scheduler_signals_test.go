package integration

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/scheduler"
	"github.com/robfig/cron/v3"
)

// cronLog is the log of every replica's lock client and scheduler, as an
// operator reads it (text, Debug and above), with redlock's loss events,
// the source of asynqlock_lock_losses_total.
type cronLog struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	losses atomic.Int32
}

func (l *cronLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *cronLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the lines at level ("" for any) that contain msg.
func (l *cronLog) lines(level, msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, "level="+level) && strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// TestCronSignalsOperatorsCanTrust: two replicas, each a robfig cron with a
// per-second job and a robfig "@every 3s" job under Singleton, started 1.5s
// apart, on real redis-server nodes (issue 25, findings 1, 7 and 9). The
// per-second job's tick records expire all along: no "redlock lock lost"
// line and no loss event. No cron line at Info. The "@every" job runs out
// of step on the two replicas, and that is warned of (once per replica at
// most).
func TestCronSignalsOperatorsCanTrust(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	log := &cronLog{}
	var crons []*cron.Cron
	noop := scheduler.Func(func(context.Context) error { return nil })
	for _, after := range []time.Duration{0, 1500 * time.Millisecond} {
		time.Sleep(after) // the second replica starts 1.5s after the first
		locks := lockClient(t, c, redlock.WithNodeTimeout(300*time.Millisecond), redlock.WithLogger(log.logger()),
			redlock.WithObserver(func(e redlock.Event) {
				if e.Kind == redlock.EventLost {
					log.losses.Add(1)
				}
			}))
		cr := cron.New(cron.WithSeconds())
		for name, spec := range map[string]string{"beat": "* * * * * *", "every": "@every 3s"} {
			w := scheduler.Singleton(locks, name, scheduler.WithLogger(log.logger()), scheduler.WithSkew(500*time.Millisecond))
			if _, err := cr.AddJob(spec, cron.NewChain(w).Then(noop)); err != nil {
				t.Fatal(err)
			}
		}
		cr.Start()
		crons = append(crons, cr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(log.lines("WARN", "out of step")) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // a few more ticks, and tick records expiring
	for _, cr := range crons {
		<-cr.Stop().Done()
	}

	if n := len(log.lines("WARN", "out of step")); n == 0 || n > 2 {
		t.Errorf("%d out-of-step warnings for the @every job, want 1 or 2", n)
	}
	if lost := log.lines("", "lock lost"); len(lost) != 0 || log.losses.Load() != 0 {
		t.Errorf("%d loss events, lines:\n%s", log.losses.Load(), strings.Join(lost, "\n"))
	}
	// At Info only the end of a trouble (a loaded machine's slow lock
	// call is a lock error at Warn), never a line per tick.
	info, back := log.lines("INFO", "cron"), log.lines("INFO", "back to normal")
	troubles := len(log.lines("WARN", "msg=\"cron job ")) + len(log.lines("ERROR", "msg=\"cron job "))
	if len(info) != len(back) || len(back) > troubles {
		t.Errorf("cron lines at Info (%d after %d troubles):\n%s", len(info), troubles, strings.Join(info, "\n"))
	}
	if t.Failed() {
		t.Logf("log:\n%s", log.buf.String())
	}
}
