// Package latency summarises HdrHistogram distributions of durations in
// one shape, shared by every package that reports latencies (rcu grace
// periods, workqueue items, the key collector).
package latency
