//go:build !linux

package main

import (
	"errors"
	"time"
)

// runNamespaces: the scenario's containers are seccomp user
// notification: Linux only.
func runNamespaces(p namespacesParams, dur time.Duration, prog *progress) (report, error) {
	return report{}, errors.New("the namespaces scenario needs Linux (seccomp user notification)")
}

func idleContainer() int { return 1 }
