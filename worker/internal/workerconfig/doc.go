// Package workerconfig holds what the worker's environment configuration
// shares with the asynqlock command: the problems a configuration has, the
// TLS files that rediss URLs inherit, and the lock client built from the
// REDLOCK_* variables, so that the command sees the locks the workers take.
package workerconfig
