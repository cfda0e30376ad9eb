// Package bench holds side-by-side benchmarks on local redis-server nodes:
// asynqlock's Redlock client (package redlock) against
// github.com/go-redsync/redsync/v4, and asynq task processing with and
// without the lock middleware (package middleware). It lives in its own
// module so that redsync never becomes a dependency of asynqlock itself.
// Everything is in the _test.go files; see README.md for what each benchmark
// measures and how to run it.
package bench
