package middleware

// Room is a process's places for its tasks, shared by every middleware
// given it (WithRoom), one per task type: run places for the tasks that try
// for their locks or run their handlers, and wait places for the tasks that
// wait for a busy lock, shared equally among the hot resources (weighed by
// their WithLimit slots). Give asynq's server as many workers as the room
// has places of both kinds: the tasks waiting for a hot resource then wait
// in wait places instead of taking the workers of tasks that could run, so
// cold resources keep their workers while a hot one keeps enough waiters in
// each process for its turns to pass within the process (docs/guide/HOTKEYS.md).
// Each resource may have half the larger number of places waiting (at
// least one). Tasks on their last retry may wait past the wait places
// (asynq would archive them otherwise). It is safe for concurrent use.
type Room struct {
	run        *runGate // nil: no bound on running tasks
	wait       *waitCap // nil: waiting tasks take run places
	maxWaiters int
}

// NewRoom returns a room of run places (0: no bound; asynq's Concurrency
// then bounds the tasks) and wait places (0: none of their own, tasks wait
// in run places).
func NewRoom(run, wait int) *Room {
	r := &Room{maxWaiters: max(1, max(run, wait)/2)}
	if run > 0 {
		r.run = newRunGate(run)
	}
	if wait > 0 {
		r.wait = newWaitCap(wait)
	}
	return r
}

// Waiting returns how many tasks wait in the room's wait places now (0
// without wait places), for a gauge.
func (r *Room) Waiting() int {
	if r.wait == nil {
		return 0
	}
	return r.wait.waiting()
}
