package main

import (
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestSyslogSend checks the line request-key's messages arrive as: the
// local format log/syslog writes, on the first socket that answers.
func TestSyslogSend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	old := syslogSockets
	syslogSockets = []string{filepath.Join(dir, "absent"), path}
	defer func() { syslogSockets = old }()

	if !syslogSend(logAuthpriv|logErr, "request-key", "Child: oops") {
		t.Fatal("syslogSend found no socket")
	}
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := ln.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^<83>[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} request-key\[[0-9]+\]: Child: oops\n$`)
	if !want.Match(buf[:n]) {
		t.Fatalf("syslog line %q", buf[:n])
	}
	syslogSockets = []string{filepath.Join(dir, "absent")}
	if syslogSend(logDebug, "request-key", "x\n") {
		t.Fatal("syslogSend reported success with no socket")
	}
}
