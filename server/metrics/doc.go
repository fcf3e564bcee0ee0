// Package metrics exports the daemon's operation counts and latencies,
// connections, keys and rcu statistics to Prometheus. It is apart from
// package server so that clients, which link server for in-process use,
// do not pay for the Prometheus client's initialisation.
package metrics
