package scheduler

import (
	"strconv"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// taskID returns the asynq task ID the bridge gives the task of job name's
// tick: "cron:<name>:<tick in Unix milliseconds>".
func taskID(name string, tick time.Time) string {
	return tickResource(name, tick)
}

// tickResource is the lock resource of one tick of a job.
func tickResource(name string, tick time.Time) string {
	return "cron:" + name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// runningResource is the lock resource held while a job runs.
func runningResource(name string) string {
	return "cron:" + name + ":running"
}

// holderOf names the holder a lock token carries, "" if none.
func holderOf(token string) string {
	h, _ := redlock.ParseHolder(token)
	return h.String()
}
