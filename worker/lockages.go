package worker

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/asynqlock/asynqlock/worker/internal/lockadmin"
)

// lockAges remembers when the /locks page first saw each claim (resource
// and token): a lock's value does not say when it was taken, so its age is
// at least the time since then. The page refreshes itself every 10s while
// open, so the figure follows a stuck lock closely; claims gone from a
// view are forgotten.
type lockAges struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// age fills each row's Held from when its claim was first seen (now for a
// new one) and sorts the rows oldest first, rows without a claim (parked
// tasks of a free resource, unanswered nodes) last.
func (a *lockAges) age(rows []lockRow, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[string]time.Time, len(rows))
	for i := range rows {
		r := &rows[i]
		if r.token == "" {
			continue
		}
		key := r.Resource + "\x00" + r.token
		since, ok := a.since[key]
		if !ok {
			since = now
		}
		seen[key], r.since = since, since
		r.Held = now.Sub(since).Round(time.Second).String()
	}
	a.since = seen
	slices.SortStableFunc(rows, func(x, y lockRow) int {
		switch {
		case x.since.IsZero() != y.since.IsZero():
			if x.since.IsZero() {
				return 1
			}
			return -1
		case !x.since.Equal(y.since):
			return x.since.Compare(y.since)
		}
		return strings.Compare(x.Resource, y.Resource)
	})
}

// tickPattern is a cron tick record's resource: cron:<job>:<tick in Unix
// milliseconds> (see package scheduler).
var tickPattern = regexp.MustCompile(`^cron:(.+):(\d{10,})$`)

// splitTicks separates cron tick records from the locks: a record is the
// proof that a tick ran once, left to expire by design, not a lock anyone
// holds.
func splitTicks(all []lockadmin.HeldLock) (locks, ticks []lockadmin.HeldLock) {
	for _, l := range all {
		if tickPattern.MatchString(l.Resource) {
			ticks = append(ticks, l)
		} else {
			locks = append(locks, l)
		}
	}
	return locks, ticks
}

// tickRow is one tick record on the page: the job, the tick, the replica
// that ran it (its host and pid: the job is in the first column) and when
// the record expires.
type tickRow struct {
	Job, Tick, Replica, Expires string
}

// tickRows describes the tick records, newest tick first.
func tickRows(ticks []lockadmin.HeldLock) []tickRow {
	var rows []tickRow
	for _, l := range ticks {
		m := tickPattern.FindStringSubmatch(l.Resource)
		claims := lockadmin.Claims(l.Nodes)
		row := tickRow{Job: m[1], Tick: tickTime(m[2]), Replica: "-", Expires: "-"}
		if len(claims) > 0 {
			row.Replica = replica(claims[0].Holder)
			row.Expires = "in " + claims[0].TTL.Round(time.Second).String()
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(x, y tickRow) int { return strings.Compare(y.Tick, x.Tick) })
	return rows
}

// tickTime renders a tick's Unix milliseconds as UTC.
func tickTime(ms string) string {
	var n int64
	for _, c := range ms {
		n = n*10 + int64(c-'0')
	}
	return time.UnixMilli(n).UTC().Format("2006-01-02 15:04:05.000")
}

// replica is the holder's process without the job name.
func replica(h redlock.Holder) string {
	h.Name = ""
	if s := h.String(); s != "" {
		return s
	}
	return "-"
}
