package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// A minimal local syslog client, in place of log/syslog: that package
// links net, and net with cgo links the C runtime into every ukeyctl
// start. request-key writes a few messages to the local log socket and
// nothing else, which needs only a socket system call.

// syslogPriority is a facility|severity, as in syslog(3).
type syslogPriority int

const (
	logErr      syslogPriority = 3
	logDebug    syslogPriority = 7
	logAuthpriv syslogPriority = 10 << 3
)

// syslogSockets are where a local syslog daemon listens, in the order
// log/syslog and glibc try them.
var syslogSockets = []string{"/dev/log", "/var/run/syslog", "/var/run/log"}

// syslogSend writes one message to the local syslog daemon in the local
// format, "<pri>Mmm dd hh:mm:ss tag[pid]: msg\n". It reports whether a
// daemon took it; like log/syslog's callers here, ukeyctl ignores failure.
func syslogSend(p syslogPriority, tag, msg string) bool {
	nl := ""
	if !strings.HasSuffix(msg, "\n") {
		nl = "\n"
	}
	line := fmt.Sprintf("<%d>%s %s[%d]: %s%s", p, time.Now().Format(time.Stamp), tag, os.Getpid(), msg, nl)
	for _, typ := range []int{syscall.SOCK_DGRAM, syscall.SOCK_STREAM} {
		for _, path := range syslogSockets {
			fd, err := socketCloexec(syscall.AF_UNIX, typ)
			if err != nil {
				return false
			}
			if syscall.Connect(fd, &syscall.SockaddrUnix{Name: path}) != nil {
				syscall.Close(fd)
				continue
			}
			_, err = syscall.Write(fd, []byte(line))
			syscall.Close(fd)
			return err == nil
		}
	}
	return false
}
