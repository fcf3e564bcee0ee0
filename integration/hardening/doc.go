// Package hardening holds ukeys' cross-cutting hardening tests, which
// exercise the daemon as its users and attackers meet it: a permission
// matrix run by real different uids through the socket, secrets that
// must never surface in logs, errors or metrics, hostile and malformed
// clients, killed clients and helpers, and a soak under load after which
// nothing may be lost. They live apart from the packages they test
// because each crosses several of them (keys, server, client, metrics),
// in integration/ with the other tests that run the whole daemon.
//
// The package's one exported function, Leaks, is the scanner those tests
// use to find a secret marker in captured text under the encodings a
// careless log line or error might give it.
//
// Long runs sit behind flags:
//
//	go test -run Soak ./integration/hardening -args -hardening.soak=5m
//
// Tests that need other uids run their clients as uids 1000-1003 and 65534
// and skip, saying so, when the test does not run as root.
package hardening
