package scheduler

import (
	"strconv"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// defaultPrefix names the keys of Singleton's and Scheduler's jobs.
const defaultPrefix = "cron:"

// taskID returns the asynq task ID the bridge gives the task of job name's
// tick: "cron:<name>:<tick in Unix milliseconds>", its tick's resource.
func taskID(name string, tick time.Time) string { return tickResource(name, tick) }

// tickResource and runningResource are the lock resources of a tick of a
// Singleton's or Scheduler's job and of its run.
func tickResource(name string, tick time.Time) string {
	return defaultPrefix + name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

func runningResource(name string) string { return defaultPrefix + name + ":running" }

// tickResource is the lock resource of one tick of the job.
func (r *runner) tickResource(tick time.Time) string {
	return r.prefix + r.name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// runningResource is the lock resource held while the job runs.
func (r *runner) runningResource() string { return r.prefix + r.name + ":running" }

// holderOf names the holder a lock token carries, "" if none.
func holderOf(token string) string {
	h, _ := redlock.ParseHolder(token)
	return h.String()
}
