// Package tuning holds the key collector's settings that only benchmarks
// and diagnosis should change: how much one work item does, whether its
// CPU time is measured, and which workqueue runs it. keys.WithGCTuning
// takes them; being internal, they cannot be set from outside this
// module, so a program that uses keys gets the collector the project
// measured.
package tuning
