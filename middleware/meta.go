package middleware

import (
	"context"

	"github.com/hibiken/asynq"
)

// taskMeta is what asynq tells a handler about its task.
type taskMeta struct {
	id       string
	queue    string
	retried  int
	maxRetry int
	prior    int  // runs of the task before its copy was made (a copy's retriedHeader)
	known    bool // run by an asynq server (the fields are set)
}

// run numbers this delivery among the task's: asynq's retry count, a copy
// counting on from its original's (the completion record's run, once.go).
func (m taskMeta) run() int { return m.prior + m.retried }

// budgetSpent reports whether asynq would archive this run on any error.
func (m taskMeta) budgetSpent() bool { return m.known && m.retried >= m.maxRetry }

// metaOf reads the task's metadata from its context. Tests replace it to run
// handlers outside an asynq server.
var metaOf = func(ctx context.Context) taskMeta {
	var m taskMeta
	m.id, m.known = asynq.GetTaskID(ctx)
	m.queue, _ = asynq.GetQueueName(ctx)
	m.retried, _ = asynq.GetRetryCount(ctx)
	m.maxRetry, _ = asynq.GetMaxRetry(ctx)
	return m
}
