package bench

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// keyRuns keeps every handler run of the hot SKUs (threeHot), per SKU.
type keyRuns struct {
	mu   sync.Mutex
	runs map[string][]span
}

// span is a time interval.
type span struct{ from, to time.Time }

func (k *keyRuns) add(sku string, from, to time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.runs == nil {
		k.runs = map[string][]span{}
	}
	k.runs[sku] = append(k.runs[sku], span{from, to})
}

// busyWhileWanted is the share of the time sku was wanted (some task of it
// enqueued and not yet done) during which a handler of it ran: a lock that
// is asked for and sits idle lowers it, a lock that nobody asks for does
// not. So it tells the same with a slower enqueuer or a lower offered load,
// where the share of the span from first start to last end (hot-busy-%)
// counts the gaps between arrivals too.
func (k *keyRuns) busyWhileWanted(sku string, tasks []adjustment, enqAt, done []time.Time) float64 {
	var wanted []span
	for i, a := range tasks {
		if a.SKU == sku && !done[i].IsZero() {
			wanted = append(wanted, span{enqAt[i], done[i]})
		}
	}
	k.mu.Lock()
	runs := slices.Clone(k.runs[sku])
	k.mu.Unlock()
	var busy time.Duration
	for _, r := range runs {
		busy += r.to.Sub(r.from)
	}
	if w := unionLength(wanted); w > 0 {
		return 100 * float64(busy) / float64(w)
	}
	return 0
}

// unionLength is the length of the union of the spans.
func unionLength(ss []span) time.Duration {
	slices.SortFunc(ss, func(a, b span) int { return a.from.Compare(b.from) })
	var total time.Duration
	var cur span
	for i, s := range ss {
		switch {
		case i == 0:
			cur = s
		case !s.from.After(cur.to):
			if s.to.After(cur.to) {
				cur.to = s.to
			}
		default:
			total += cur.to.Sub(cur.from)
			cur = s
		}
	}
	if len(ss) > 0 {
		total += cur.to.Sub(cur.from)
	}
	return total
}

// reportHotKeys reports, for each hot SKU the run has, how busy its lock
// was while it was wanted, and the least of them (hot-wanted-min-%).
func reportHotKeys(b *testing.B, tasks []adjustment, enqAt, done []time.Time, k *keyRuns) {
	least, n := 100.0, 0
	for i, sku := range threeHot {
		if !slices.ContainsFunc(tasks, func(a adjustment) bool { return a.SKU == sku }) {
			continue
		}
		p := k.busyWhileWanted(sku, tasks, enqAt, done)
		least, n = min(least, p), n+1
		b.ReportMetric(p, "hot"+string(rune('1'+i))+"-wanted-%")
	}
	if n > 0 {
		b.ReportMetric(least, "hot-wanted-min-%")
	}
}

// gapSplit splits the mean gap between two hot runs where the lock was
// taken after the previous run's end: from that end to the lock
// (hand-over), and from the lock to the handler's start (the run gate, the
// middleware's own steps).
func (s *hotSpan) gapSplit() (toLock, toStart time.Duration) {
	s.mu.Lock()
	runs := slices.Clone(s.runs)
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b hotRun) int { return a.start.Compare(b.start) })
	var n int
	for i := 1; i < len(runs); i++ {
		r := runs[i]
		if r.acquired.IsZero() || r.acquired.Before(runs[i-1].end) {
			continue
		}
		n++
		toLock += r.acquired.Sub(runs[i-1].end)
		toStart += r.start.Sub(r.acquired)
	}
	if n == 0 {
		return 0, 0
	}
	return toLock / time.Duration(n), toStart / time.Duration(n)
}
