// Package ratelimit throttles log lines: a [Limiter] lets a few events
// through per interval and counts the rest, so that a flood of refused
// connections (to the daemon's socket or to its seccomp agent's) costs
// a few lines, each saying how many it stands for, instead of one each.
package ratelimit
