// Package embedded runs an in-process Redis (miniredis) whose keys expire in
// real time, for tests and demos that should not need a redis-server binary.
//
// # What miniredis v2.40.0 does with time (read from its sources)
//
//   - By default TTLs never run down on their own: only
//     Miniredis.FastForward(d) decrements them (and deletes keys whose TTL
//     reaches 0).
//   - FastForward does not move the clock: TIME returns the value given to
//     SetTime, or time.Now() if SetTime was never called (or was called with
//     the zero time). PEXPIREAT/EXPIREAT and SET ... PXAT are converted to a
//     TTL against that same clock. Note that SetTime(time.Now()) would freeze
//     TIME at that instant.
//   - ClockTTL(true) makes TTLs run down with that clock: on every access to
//     a database (every command touching keys, and the Miniredis accessors)
//     all TTLs are decremented by the time elapsed since the previous access
//     and expired keys are deleted. This is lazy but exact at each command,
//     and coherent with TIME.
//
// Start therefore enables ClockTTL and never calls SetTime: TIME is the real
// wall clock (UTC, microsecond resolution) and TTLs expire in real time. A
// background goroutine calling FastForward every few milliseconds with the
// elapsed monotonic time was considered and rejected: each tick subtracts its
// whole interval from every key, including keys created during that interval,
// so a key could expire up to one tick plus any scheduling delay early, which
// breaks tests of lock validity. (WithCoarseExpiry offers exactly that, for
// servers other than lock nodes: exact expiry costs every command a sorted
// walk over all keys, which dominates a broker holding thousands of tasks.)
// ClockTTL, like redis-server itself, measures
// expiry against the wall clock, so a step of the system clock shifts TTLs.
// A *RedisDB kept from Miniredis.DB does not trigger expiry by itself; go
// through a command or a Miniredis method.
//
// # Lua scripting
//
// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD/EXISTS/FLUSH are
// supported (gopher-lua, Lua 5.1, with cjson). redis.call and redis.pcall
// dispatch to the same command table as clients, under the server's lock, so
// scripts are atomic as in Redis. From scripts, TIME (the wall clock, as
// above), PUBLISH (delivered to subscribers), SET ... NX PX, PEXPIRE and
// PTTL all work; (P)SUBSCRIBE, MULTI/EXEC/WATCH, AUTH and nested EVAL are
// refused as in Redis. Unlike Redis, TTLs keep running down during a script
// rather than being frozen at its start, which only matters for scripts that
// run for a noticeable time.
package embedded
