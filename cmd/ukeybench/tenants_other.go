//go:build !linux

package main

import (
	"errors"
	"time"
)

// runTenants: the scenario's containers are seccomp user notification,
// its attackers other uids and a user namespace: Linux only.
func runTenants(p tenantsParams, dur, interval time.Duration, prog *progress) (report, error) {
	return report{}, errors.New("the tenants scenario needs Linux (seccomp user notification, user namespaces)")
}

func tenantChild(string) int { return 1 }
