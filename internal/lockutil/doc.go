// Package lockutil holds small pieces of lock handling that several packages
// of this module need (the middleware and the scheduler today), so that each
// is written once.
package lockutil
