// Package bench compares asynqlock's Redlock client (package redlock) with
// github.com/go-redsync/redsync/v4 on the same local redis-server nodes, in
// one run. It lives in its own module so that redsync never becomes a
// dependency of asynqlock itself. Everything is in the _test.go files; see
// README.md for what each benchmark measures and how to run it.
package bench
