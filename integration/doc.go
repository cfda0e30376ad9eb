// Package integration holds end-to-end and fault tests of asynqlock against
// real redis-server processes started by the test harness on free loopback
// ports. It has no non-test code beyond this comment.
package integration
