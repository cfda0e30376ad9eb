// Package lockutil holds small pieces of lock handling that several packages
// of this module need (the middleware and the scheduler today), so that each
// is written once, and reaches the mechanics of redlock's Lock that they
// need and its users do not (mechanics.go), which are not redlock's API.
package lockutil
