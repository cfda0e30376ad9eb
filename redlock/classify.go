package redlock

import (
	"github.com/asynqlock/asynqlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// A classifier turns one node's reply into the outcome a round counts:
// OK, refused (the node answered no) or failed (no usable answer).

// classifyAnswered counts any answer as OK.
func classifyAnswered(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	return outOK
}

// classifySet is for SET NX and the fencing acquire script: a value means
// set, nil means held by another.
func classifySet(rep transport.Reply) outcome {
	switch {
	case rep.Err == nil:
		return outOK
	case isNil(rep.Err):
		return outRefused
	}
	return outFailed
}

// classifyOne is for scripts answering 1 (done) or 0 (not our key).
func classifyOne(rep transport.Reply) outcome {
	if rep.Err != nil {
		return outFailed
	}
	if n, ok := rep.Val.(int64); ok && n == 1 {
		return outOK
	}
	return outRefused
}

func isNil(err error) bool { return err == redis.Nil }
