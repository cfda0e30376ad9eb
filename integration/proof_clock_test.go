package integration

import "time"

// The proof's clock.
//
// Critical sections recorded by different worker processes are compared on
// one time axis, so every process must read the same clock. All workers run
// on the machine of the test, and a stamp is
//
//	wall clock at process start + monotonic time elapsed since
//
// in nanoseconds. Linux's CLOCK_REALTIME and CLOCK_MONOTONIC are slewed
// together by NTP and differ only by steps, so as long as the wall clock is
// not stepped between the starts of two processes of one run (a few hundred
// milliseconds), every process's stamps are CLOCK_MONOTONIC plus one common
// offset: comparable to the nanosecond, and immune to a step during the run.
// Proofs spanning machines would need a bounded-skew clock instead.

// clockBase is this process's reference point for stamps.
var clockBase = time.Now()

// stamp returns the current time on the proof's clock, in nanoseconds.
func stamp() int64 { return clockBase.UnixNano() + int64(time.Since(clockBase)) }

// stampOf converts a time taken in this process (with its monotonic
// reading) to the proof's clock.
func stampOf(t time.Time) int64 { return clockBase.UnixNano() + int64(t.Sub(clockBase)) }
