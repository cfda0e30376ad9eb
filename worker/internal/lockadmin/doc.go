// Package lockadmin builds the module's own operator views on redlock's
// Admin calls (cmd/asynqlock, the worker's health checks and /locks page):
// the held locks grouped by holder and slot, a forced release by token, and
// judgements of redlock.Client.Check's reports (same server twice, clocks
// apart).
package lockadmin
