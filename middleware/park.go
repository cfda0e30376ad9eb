package middleware

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockutil"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Parking (docs/guide/HOTKEYS.md) leaves a busy task in asynq and records it
// in a per-resource FIFO, under the queue's hash tag, so that a task of its
// resource starting brings it back; a backstop delay does if nobody does.
const (
	parkFIFOPart = "asynqlock:park:"     // list of members, oldest first
	parkOutPart  = "asynqlock:promoted:" // zset: promoted tasks not started yet
	parkMarkPart = "asynqlock:parked:"   // a task that was parked once
)

const (
	parkBackstopMin = 3 * time.Second
	parkBackstopMax = time.Minute
	// a parked task due this soon is left to asynq's forwarder
	parkDueMargin = 500 * time.Millisecond
	parkMarkTTL   = 10 * time.Minute
	// how long a record may name a task whose run is still returning
	parkSettle = 2 * time.Second
	parkScan   = 16 // records one promotion looks at
	// a promoted task not started this long after no longer counts as on its way
	promotedStale = 10 * time.Second
	// the mark left to a task found running as its record was dropped
	promotedMark = time.Minute
)

func queuePrefix(queue string) string { return "asynq:{" + queue + "}:" }

func fifoKey(queue, res string) string { return queuePrefix(queue) + parkFIFOPart + res }

func markKey(queue, id string) string { return queuePrefix(queue) + parkMarkPart + id }

func outKey(queue, res string) string { return queuePrefix(queue) + parkOutPart + res }

// parkScript is park's: KEYS fifo, the task's mark; ARGV member, TTL ms,
// head ('1': at the head whatever the mark). Returns -1 (marked: parked
// before) or the FIFO's length.
var parkScript = redis.NewScript(`
local n
if ARGV[3] == '1' then
  n = redis.call('LPUSH', KEYS[1], ARGV[1])
else
  if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  n = redis.call('RPUSH', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return n`)

// promoteScript counts the started tasks (ARGV[10] on) as arrived, then
// keeps up to ARGV[4] promoted tasks of a resource on their way, ARGV[6]
// without backlog, returning the parked tasks to move (promote); it writes
// only its own keys (docs/guide/HOTKEYS.md, "Promote ahead", "Why it is safe").
// KEYS: fifo, promoted zset. ARGV: task key prefix, pending key, now (ms),
// depth, settle (ms), depth without backlog, stale (ms), mark prefix, retry
// key, started IDs... Returns {remaining, id1, at1, id2, at2...}.
var promoteScript = redis.NewScript(`
for i = 10, #ARGV do
  redis.call('ZREM', KEYS[2], ARGV[i])
  redis.call('DEL', ARGV[8] .. ARGV[i])
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local out = {0}
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[7]))
local queued, outs = 0, 0
for _, o in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local st = redis.call('HGET', ARGV[1] .. o, 'state')
  if st == 'pending' then queued = queued + 1 end
  if st == 'pending' or st == 'active' then
    outs = outs + 1
  else
    redis.call('ZREM', KEYS[2], o)
  end
end
local depth = ARGV[4]
if redis.call('LLEN', ARGV[2]) <= queued then depth = ARGV[6] end
local room = tonumber(depth) - outs
local moved, i = 0, 0
for scanned = 1, ` + strconv.Itoa(parkScan) + ` do
  if moved >= room then break end
  local m = redis.call('LINDEX', KEYS[1], i)
  if not m then break end
  local keep = false
  local at, nonce, id = string.match(m, '^(%d+)|(%w*)|(.*)$')
  if id then
    local f = redis.call('HMGET', ARGV[1] .. id, 'state', 'msg', 'group')
    local state, msg, group = f[1], f[2], f[3]
    if (not state or state == 'active') and now - tonumber(at) < tonumber(ARGV[5]) then
      keep = true
    elseif state == 'retry' and tonumber(redis.call('ZSCORE', ARGV[9], id) or 0) * 1000 <= now + ` + strconv.FormatInt(parkDueMargin.Milliseconds(), 10) + ` then
      -- due: asynq's forwarder brings it back (a RunTask racing it could run it twice)
    elseif (state == 'retry' or state == 'archived') and nonce ~= '' and msg and string.find(msg, nonce, 1, true) and (not group or group == '') then
      redis.call('ZADD', KEYS[2], now, id)
      moved = moved + 1
      table.insert(out, id)
      table.insert(out, tonumber(at))
    elseif not state or state == 'completed' then
      redis.call('DEL', ARGV[8] .. id)
    elseif state == 'active' and redis.call('PTTL', ARGV[8] .. id) > ` + strconv.FormatInt(promotedMark.Milliseconds(), 10) + ` then
      redis.call('PEXPIRE', ARGV[8] .. id, ` + strconv.FormatInt(promotedMark.Milliseconds(), 10) + `)
    end
  end
  if keep then
    i = i + 1
  else
    redis.call('LREM', KEYS[1], 1, m)
  end
end
if moved > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
out[1] = redis.call('LLEN', KEYS[1])
return out`)

// park records the running task id in res's FIFO with a new nonce, at its
// tail unless it was parked once already (then n is -1), or with head at its
// head. It returns the nonce of its conflict and the FIFO's length.
func (m *mw) park(ctx context.Context, queue, res, id string, head bool) (nonce string, n int, err error) {
	nonce = "p" + rand.Text()[:12]
	member := strconv.FormatInt(time.Now().UnixMilli(), 10) + "|" + nonce + "|" + id
	cctx, cancel := lockutil.Detached(ctx)
	defer cancel()
	n, err = parkScript.Run(cctx, m.cfg.broker, []string{fifoKey(queue, res), markKey(queue, id)},
		member, m.parkTTL().Milliseconds(), head).Int()
	return nonce, n, err
}

func (m *mw) parkTTL() time.Duration { return max(m.cfg.backstop, parkBackstopMax) + parkMarkTTL }

type promotion struct {
	id     string
	parked time.Duration // how long it was parked
}

// promote runs promoteScript for res and moves its tasks (RunTask); it
// returns them and how many records remain.
func promote(ctx context.Context, broker redis.UniversalClient, run taskInspector, queue, res string,
	started []string, d depths) ([]promotion, int, error) {
	now := time.Now()
	p := queuePrefix(queue)
	args := []any{p + "t:", p + "pending", now.UnixMilli(), d.busy, parkSettle.Milliseconds(), d.idle,
		promotedStale.Milliseconds(), p + parkMarkPart, p + "retry"}
	for _, id := range started {
		args = append(args, id)
	}
	vals, err := promoteScript.Run(ctx, broker, []string{fifoKey(queue, res), outKey(queue, res)},
		args...).Slice()
	if err != nil || len(vals) == 0 {
		return nil, 0, err
	}
	left, _ := vals[0].(int64)
	var out []promotion
	for i := 1; i+1 < len(vals); i += 2 {
		id, _ := vals[i].(string)
		at, _ := vals[i+1].(int64)
		if rerr := run.RunTask(queue, id); rerr != nil {
			if !errors.Is(rerr, asynq.ErrTaskNotFound) && !strings.Contains(rerr.Error(), "already") {
				err = rerr
			}
			continue // gone, or back by itself meanwhile: not reported
		}
		out = append(out, promotion{id: id, parked: now.Sub(time.UnixMilli(at))})
	}
	return out, int(left), err
}

// backstop is how long a parked task stays away if nobody promotes it: four
// times the hold time of the tasks ahead of it, within [3s, 1m].
func (m *mw) backstop(res string, ahead int) time.Duration {
	if m.cfg.backstop > 0 {
		return m.cfg.backstop
	}
	d := 4 * time.Duration(ahead+1) * m.turnOf(m.stateOf(res).hold)
	return min(max(d, parkBackstopMin), parkBackstopMax)
}
