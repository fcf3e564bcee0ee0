// Package metrics exports the daemon's operation counts and latencies,
// connections, keys, quota use per uid (ukeyd_quota_*, what
// /proc/key-users shows), the key collector's statistics (ukeyd_gc_*:
// passes, items, keys examined and destroyed, links pruned by reason,
// keyring sweeps, work-item and death-to-destruction times) and rcu
// statistics to Prometheus. No label or value carries a description or a
// payload. It is apart from package server so that clients, which link
// server for in-process use, do not pay for the Prometheus client's
// initialisation.
package metrics
