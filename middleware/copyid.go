package middleware

import (
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// resubmitMark separates a task ID from its resubmission count.
const resubmitMark = "~r"

// maxCopyGenerations bounds the finished copies copyID steps over.
const maxCopyGenerations = 16

// nextID derives the ID of a resubmitted task: "id~r1", then "id~r2"...
func nextID(id string) string {
	base, n := id, 0
	if i := strings.LastIndex(id, resubmitMark); i >= 0 {
		if k, err := strconv.Atoi(id[i+len(resubmitMark):]); err == nil {
			base, n = id[:i], k
		}
	}
	return base + resubmitMark + strconv.Itoa(n+1)
}

// copyID picks the ID under which this run resubmits its task: nextID of
// its own, unless the broker holds a copy under that ID that finished
// (completed and kept, or archived) in an earlier run of the task, such as
// an archived task an operator runs again: that copy is no copy of this
// run, and a conflict with it must not pass for this run's copy being
// stored (which would revoke the run and enqueue nothing). So is a marker
// (claimCopyID), in any state: an earlier delivery of this task claimed the
// ID, and a copy stored under it would never run. Such IDs are stepped over
// to the next generation. A copy that is still live (pending, scheduled,
// retrying, running), or a lookup that fails, keeps the ID: a conflict on
// it is this run's copy stored by an earlier try or delivery.
func (r *taskRun) copyID() string {
	id := nextID(r.meta.id)
	if r.m.cfg.inspector == nil || r.meta.queue == "" {
		return id
	}
	for range maxCopyGenerations {
		info, err := r.lookupCopy(id)
		if err != nil || !finished(info.State) && !isMarker(info) {
			return id
		}
		id = nextID(id)
	}
	return id
}

// finished reports a task state that asynq never runs again by itself.
func finished(s asynq.TaskState) bool {
	return s == asynq.TaskStateCompleted || s == asynq.TaskStateArchived
}
