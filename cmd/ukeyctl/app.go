package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// exitCode is what exit panics with; Main recovers it. keyctl's actions
// exit from wherever they are, and so do these.
type exitCode int

// app is one invocation: its standard streams, its connection to the
// daemon (made on first use) and the caller's credentials.
type app struct {
	prog    string // base name of argv[0]
	stdin   io.Reader
	rawOut  io.Writer
	out     *bufio.Writer // stdout, buffered as C's stdio buffers it
	lineBuf bool          // stdout is a terminal: flush at each newline
	unbuf   bool          // flush after every write
	stderr  io.Writer
	cl      *client.Client
	path    string // the daemon's socket, once connect has chosen it

	credsLoaded bool
	euid, egid  uint32
	groups      []uint32
}

// Main runs ukeyctl with argv (argv[0] included) and returns the exit
// status. Tests call it in process.
func Main(argv []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	prog := "ukeyctl"
	if len(argv) > 0 {
		prog = filepath.Base(argv[0])
	}
	a := &app{prog: prog, stdin: stdin, rawOut: stdout, stderr: stderr}
	a.out = bufio.NewWriterSize(stdout, 4096)
	if f, ok := stdout.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			a.lineBuf = true
		}
	}
	defer func() {
		if r := recover(); r != nil {
			ec, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(ec)
		}
		a.out.Flush()
		if a.cl != nil {
			a.cl.Close()
		}
	}()
	if prog == "request-key" {
		a.requestKeyMain(argv)
	}
	a.doCommand(argv, commands, "")
	return 0
}

// exit ends the invocation with status code, as exit(3) does.
func (a *app) exit(code int) {
	panic(exitCode(code))
}

// printf writes to the buffered stdout.
func (a *app) printf(format string, args ...any) {
	fmt.Fprintf(a.out, format, args...)
	if a.unbuf || a.lineBuf && strings.Contains(format, "\n") {
		a.out.Flush()
	}
}

// write writes raw bytes to the buffered stdout.
func (a *app) write(b []byte) {
	a.out.Write(b)
	if a.lineBuf {
		a.out.Flush()
	}
}

// eprintf writes to stderr, which is unbuffered.
func (a *app) eprintf(format string, args ...any) {
	fmt.Fprintf(a.stderr, format, args...)
}

// perror prints "msg: strerror(errno)" as perror(3) does. A connection
// whose handshake the first call carried (ukeyctl defers it,
// client.WithDeferredHandshake) fails there instead, and then ukeyctl
// says why and exits as a failed connect does.
func (a *app) perror(msg string, err error) {
	if he := (*client.HandshakeError)(nil); errors.As(err, &he) {
		a.eprintf("ukeyctl: %v\n", handshakeFailure(a.path, err))
		a.exit(1)
	}
	a.eprintf("%s: %s\n", msg, strerror(err))
}

// fail is keyctl's error(): perror and exit 1. A failure that comes from
// a lost session (UKEYS_SESSION names a session the daemon no longer
// has) says so on a second line.
func (a *app) fail(msg string, err error) {
	a.perror(msg, err)
	if a.cl != nil && errors.Is(err, keyctl.EKEYREVOKED) {
		if lost := a.cl.SessionLost(); lost != nil {
			a.eprintf("ukeyctl: the session in %s is gone (was ukeyd restarted?) and its keyring is revoked: "+
				"start a new one with 'ukeyctl new_session' or 'ukeyctl session', or unset %s\n", client.SessionEnv, client.SessionEnv)
		}
	}
	a.exit(1)
}

// strerror renders an error as glibc's strerror renders its errno.
func strerror(err error) string {
	var ke keyctl.Errno
	if errors.As(err, &ke) {
		return ke.Error()
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		if s := keyctl.Errno(se).Error(); !strings.HasPrefix(s, "Unknown error") {
			return s
		}
		return capitalize(se.Error())
	}
	if errors.Is(err, io.EOF) {
		return "connection to ukeyd closed"
	}
	return err.Error()
}

// errnoOf returns the errno an error carries, or EIO.
func errnoOf(err error) keyctl.Errno {
	var ke keyctl.Errno
	if errors.As(err, &ke) {
		return ke
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return keyctl.Errno(se)
	}
	return keyctl.EIO
}

func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + s[n:]
}

// c returns the connection to the daemon, making it (and starting the
// daemon if need be) on first use.
func (a *app) c() *client.Client {
	if a.cl == nil {
		cl, err := a.connect()
		if err != nil {
			a.eprintf("ukeyctl: %v\n", err)
			a.exit(1)
		}
		a.cl = cl
	}
	return a.cl
}

// loadCreds fetches the effective ids and groups calc_perms compares with.
func (a *app) loadCreds() {
	if a.credsLoaded {
		return
	}
	a.credsLoaded = true
	a.euid = uint32(os.Geteuid())
	a.egid = uint32(os.Getegid())
	gs, _ := os.Getgroups()
	for _, g := range gs {
		a.groups = append(a.groups, uint32(g))
	}
}
