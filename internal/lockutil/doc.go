// Package lockutil holds the small pieces of lock handling that the
// middleware, the scheduler and the lock client share, so that each is
// written once.
package lockutil
