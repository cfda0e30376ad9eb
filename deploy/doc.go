// Package deploy holds what it takes to run an asynqlock worker in
// production: a Dockerfile, Kubernetes manifests (the worker, lock nodes,
// disruption budgets, a ServiceMonitor), a Prometheus scrape job and alert
// rules, and a Grafana dashboard. It has no Go API: its tests check those
// files against the worker (its configuration, probes, metrics) and run the
// dashboard's queries and the alert rules on a live Prometheus.
package deploy
