package scheduler

import "github.com/asynqlock/asynqlock/redlock"

// holderOf names the holder a lock token carries, "" if none.
func holderOf(token string) string {
	h, _ := redlock.ParseHolder(token)
	return h.String()
}
