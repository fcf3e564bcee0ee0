package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
)

// With no daemon on the socket, ukeyctl starts ukeyd (here the test
// binary acting as one, found in $PATH), says so once, and uses it.
func TestAutostart(t *testing.T) {
	bin := binDir(t, "ukeyd")
	sock := filepath.Join(t.TempDir(), "run", "ukeyd.sock")
	t.Setenv("UKEYS_SOCKET", sock)
	t.Setenv("UKEYS_NO_AUTOSTART", "")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	r := run("keyctl", "", "id", "@u")
	pidText, err := os.ReadFile(sock + ".pid")
	if err != nil {
		t.Fatalf("first command: %+v; no pid file: %v", r, err)
	}
	pid, _ := strconv.Atoi(string(pidText))
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		// Wait for it to go, so that its reaper goroutine here ends.
		for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	want := fmt.Sprintf("ukeyctl: started ukeyd (pid %d) on %s; its log is %s\n", pid, sock, filepath.Join(filepath.Dir(sock), "ukeyd.log"))
	if os.Geteuid() == 0 {
		want += "ukeyctl: it serves every user of the host\n"
	} else {
		want += fmt.Sprintf("ukeyctl: it serves uid %d only; a ukeyd run by root (on %s) would serve every user of the host in one store\n", os.Geteuid(), endpoint.System())
	}
	if r.Code != 0 || r.Stderr != want {
		t.Fatalf("first command: %+v, want on stderr:\n%s", r, want)
	}
	r2 := run("keyctl", "", "id", "@u")
	if r2.Code != 0 || r2.Stderr != "" || r2.Stdout != r.Stdout {
		t.Fatalf("second command: %+v (first printed %q)", r2, r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(sock), "ukeyd.log")); err != nil {
		t.Errorf("no daemon log beside the socket: %v", err)
	}
}

func TestNoAutostart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ukeyd.sock")
	t.Setenv("UKEYS_SOCKET", sock)
	t.Setenv("UKEYS_NO_AUTOSTART", "1")
	r := run("keyctl", "", "id", "@s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "UKEYS_NO_AUTOSTART") {
		t.Fatalf("%+v", r)
	}
	// Usage errors need no daemon.
	if r := run("keyctl", "", "id"); r.Code != 2 {
		t.Fatalf("usage without a daemon: %+v", r)
	}
	t.Setenv("UKEYS_NO_AUTOSTART", "")
	t.Setenv("PATH", t.TempDir())
	r = run("keyctl", "", "id", "@s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "no ukeyd found") {
		t.Fatalf("without a ukeyd to start: %+v", r)
	}
}
