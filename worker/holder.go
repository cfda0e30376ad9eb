package worker

import (
	"context"

	"github.com/asynqlock/asynqlock/redlock"
	"github.com/hibiken/asynq"
)

// nameHolder makes every lock a task's handler takes name the task (type and
// id) as its holder, so operators see which task holds a resource.
func nameHolder(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		name := t.Type()
		if id, ok := asynq.GetTaskID(ctx); ok {
			name += " " + id
		}
		return h.ProcessTask(redlock.ContextWithHolder(ctx, name), t)
	})
}
