package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
)

// readyEnv names the descriptor on which a daemon started by -detach
// says it has taken over.
const readyEnv = "UKEYD_READY_FD"

// detached runs ukeyd -takeover in the background, with this process's
// arguments less -detach, and returns once it has taken over (0) or failed (1): what
// systemd's ExecReload needs, a command that ends, while the daemon it
// started serves on (and has told systemd it is the main process now).
func detached() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ukeyd:", err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ukeyd:", err)
		return 1
	}
	defer r.Close()
	args := slices.DeleteFunc(slices.Clone(os.Args[1:]), func(a string) bool {
		return a == "-detach" || a == "--detach" || strings.HasPrefix(a, "-detach=") || strings.HasPrefix(a, "--detach=")
	})
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		fmt.Fprintln(os.Stderr, "ukeyd:", err)
		return 1
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line == "ok\n" {
		cmd.Process.Release()
		return 0
	}
	// It failed (and said why on standard error), or died.
	cmd.Wait()
	return 1
}

// readyFD tells the ukeyd that started this one with -detach that it
// serves.
func readyFD() {
	if os.Getenv(readyEnv) != "3" {
		return
	}
	os.Unsetenv(readyEnv)
	f := os.NewFile(3, "ready")
	fmt.Fprintln(f, "ok")
	f.Close()
}
