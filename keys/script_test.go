package keys

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/script"
)

// TestScripts runs the scripts in testdata/*.script (see internal/script
// for the format) against a Service in process, with a fake clock. Each
// file is a story of one or more callers told in keyctl's words, and
// what the kernel answers at each step:
//
//	caller NAME UID GID [GROUP...]  a process with a session keyring of its own;
//	                                the first is the one commands act as
//	as NAME COMMAND...              COMMAND as caller NAME
//	id REF                          the keyring's serial (@s, @u…): KEYCTL_GET_KEYRING_ID
//	add TYPE DESC DATA RING         add_key; prints the key
//	newring NAME RING               add_key of a keyring; prints it
//	update KEY DATA                 KEYCTL_UPDATE
//	print KEY                       KEYCTL_READ, the payload as text
//	rlist RING                      KEYCTL_READ of a keyring: its keys in order
//	describe KEY                    KEYCTL_DESCRIBE, as keyctl describe shows it
//	link KEY RING, unlink KEY RING  KEYCTL_LINK, KEYCTL_UNLINK
//	move [-f] KEY FROM TO           KEYCTL_MOVE, KEYCTL_MOVE_EXCL unless -f
//	revoke, invalidate KEY          KEYCTL_REVOKE, KEYCTL_INVALIDATE
//	clear RING                      KEYCTL_CLEAR
//	timeout KEY SECS                KEYCTL_SET_TIMEOUT
//	setperm KEY MASK                KEYCTL_SETPERM (MASK in hex, 0x…)
//	chown KEY UID, chgrp KEY GID    KEYCTL_CHOWN
//	search RING TYPE DESC [DEST]    KEYCTL_SEARCH; prints the key
//	sleep SECS                      let SECS seconds pass
//
// Keys are named K1, K2… in the order they are first printed, as ukeyctl's
// golden files mask them; a command names a key that way, by a special id
// (@t @p @s @u @us @g) or by a number. A failure prints keyctl's message
// (the libkeyutils call, then the C library's text of the errno) and
// exits 1. After every step the collector catches up with the clock, as
// the kernel's does with its timers long before a shell runs the next
// command.
//
// The scripts say what the kernel does, not what this package happens to
// do: each was also played with keyutils' keyctl against Linux 6.18, each
// caller a process of its own uid in a session of its own, and the kernel
// answered every step as written (keyctl pads describe's columns; the
// waits of gc_delay were not played).
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.script")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".script"), func(t *testing.T) {
			sc := &scripted{t: t, e: newEnv(t), callers: map[string]*Caller{},
				labels: map[Serial]string{}, serials: map[string]Serial{}}
			script.Run(t, f, sc.step)
		})
	}
}

// scripted is the state of one script: its callers and the names it has
// given keys.
type scripted struct {
	t       *testing.T
	e       *env
	callers map[string]*Caller
	first   *Caller
	labels  map[Serial]string
	serials map[string]Serial
	line    int    // of the step running
	cmd     string // the step running
}

// usage fails a script that misuses a command: the script is wrong, not
// the code under test.
func (sc *scripted) usage(format string, args ...any) {
	sc.t.Helper()
	sc.t.Fatalf("line %d: $ %s: %s", sc.line, sc.cmd, fmt.Sprintf(format, args...))
}

func (sc *scripted) step(_ testing.TB, s *script.Step) script.Result {
	sc.line, sc.cmd = s.Line, s.Cmd
	args := s.Args
	c := sc.first
	if args[0] == "as" {
		if len(args) < 3 || sc.callers[args[1]] == nil {
			sc.usage("as NAME COMMAND..., NAME a caller")
		}
		c, args = sc.callers[args[1]], args[2:]
	}
	if c == nil && args[0] != "caller" {
		sc.usage("no caller yet")
	}
	out, op, err := sc.do(c, args[0], args[1:])
	// The kernel's collector runs on timers of its own; here it catches
	// up with the clock before the next step.
	sc.e.s.RequestGC()
	sc.e.settle()
	if err != nil {
		errno, _ := ErrnoOf(err)
		return script.Result{Stderr: op + ": " + errno.Error() + "\n", Code: 1}
	}
	return script.Result{Stdout: out}
}

// do runs one command and returns what it prints, or the libkeyutils
// call that failed and its error.
func (sc *scripted) do(c *Caller, cmd string, a []string) (out, op string, err error) {
	n := func(want int) {
		if len(a) != want {
			sc.usage("%s takes %d arguments", cmd, want)
		}
	}
	// key prints a key a call returned, if it returned one.
	key := func(id Serial, err error) (string, error) {
		if err != nil {
			return "", err
		}
		return sc.label(id) + "\n", nil
	}
	switch cmd {
	case "caller":
		if len(a) < 3 || sc.callers[a[0]] != nil {
			sc.usage("caller NAME UID GID [GROUP...], NAME new")
		}
		var groups []uint32
		for _, g := range a[3:] {
			groups = append(groups, sc.uint32(g))
		}
		nc := sc.e.caller(sc.uint32(a[1]), sc.uint32(a[2]), groups...)
		sc.callers[a[0]] = nc
		if sc.first == nil {
			sc.first = nc
		}
		return "", "", nil
	case "id":
		n(1)
		out, err := key(c.GetKeyringID(sc.ref(a[0]), false))
		return out, "keyctl_get_keyring_ID", err
	case "add":
		n(4)
		out, err := key(c.AddKey(a[0], a[1], []byte(a[2]), sc.ref(a[3])))
		return out, "add_key", err
	case "newring":
		n(2)
		out, err := key(c.AddKey("keyring", a[0], nil, sc.ref(a[1])))
		return out, "add_key", err
	case "update":
		n(2)
		return "", "keyctl_update", c.Update(sc.ref(a[0]), []byte(a[1]))
	case "print":
		n(1)
		b, err := c.Read(sc.ref(a[0]))
		return string(b) + "\n", "keyctl_read_alloc", err
	case "rlist":
		n(1)
		b, err := c.Read(sc.ref(a[0]))
		if err != nil {
			return "", "keyctl_read_alloc", err
		}
		var names []string
		for _, id := range serials(b) {
			names = append(names, sc.label(id))
		}
		return strings.Join(names, " ") + "\n", "", nil
	case "describe":
		n(1)
		d, err := c.Describe(sc.ref(a[0]))
		return fmt.Sprintf("%s: %s %d %d %s: %s\n", a[0], permString(d.Perm), d.UID, d.GID, d.Type, d.Description),
			"keyctl_describe_alloc", err
	case "link":
		n(2)
		return "", "keyctl_link", c.Link(sc.ref(a[0]), sc.ref(a[1]))
	case "unlink":
		n(2)
		return "", "keyctl_unlink", c.Unlink(sc.ref(a[0]), sc.ref(a[1]))
	case "move":
		flags := uint32(MoveExcl)
		if len(a) > 0 && a[0] == "-f" {
			flags, a = 0, a[1:]
		}
		n(3)
		return "", "keyctl_move", c.Move(sc.ref(a[0]), sc.ref(a[1]), sc.ref(a[2]), flags)
	case "revoke":
		n(1)
		return "", "keyctl_revoke", c.Revoke(sc.ref(a[0]))
	case "invalidate":
		n(1)
		return "", "keyctl_invalidate", c.Invalidate(sc.ref(a[0]))
	case "clear":
		n(1)
		return "", "keyctl_clear", c.Clear(sc.ref(a[0]))
	case "timeout":
		n(2)
		return "", "keyctl_set_timeout", c.SetTimeout(sc.ref(a[0]), sc.uint32(a[1]))
	case "setperm":
		n(2)
		return "", "keyctl_setperm", c.SetPerm(sc.ref(a[0]), Perm(sc.uint32(a[1])))
	case "chown":
		n(2)
		return "", "keyctl_chown", c.Chown(sc.ref(a[0]), int64(sc.uint32(a[1])), -1)
	case "chgrp":
		n(2)
		return "", "keyctl_chown", c.Chown(sc.ref(a[0]), -1, int64(sc.uint32(a[1])))
	case "search":
		if len(a) != 3 {
			n(4)
		}
		var dest Serial
		if len(a) == 4 {
			dest = sc.ref(a[3])
		}
		out, err := key(c.Search(sc.ref(a[0]), a[1], a[2], dest))
		return out, "keyctl_search", err
	case "sleep":
		n(1)
		sc.e.clock.advance(time.Duration(sc.uint32(a[0])) * time.Second)
		return "", "", nil
	}
	sc.usage("unknown command %s", cmd)
	return "", "", nil
}

// ref resolves a key named in a script.
func (sc *scripted) ref(name string) Serial {
	switch name {
	case "@t":
		return ThreadKeyring
	case "@p":
		return ProcessKeyring
	case "@s":
		return SessionKeyring
	case "@u":
		return UserKeyring
	case "@us":
		return UserSessionKeyring
	case "@g":
		return GroupKeyring
	}
	if id, ok := sc.serials[name]; ok {
		return id
	}
	v, err := strconv.ParseInt(name, 10, 32)
	if err != nil {
		sc.usage("%q names no key", name)
	}
	return Serial(v)
}

// label names a serial, K1, K2… in the order they are first shown.
func (sc *scripted) label(id Serial) string {
	if l, ok := sc.labels[id]; ok {
		return l
	}
	l := "K" + strconv.Itoa(len(sc.labels)+1)
	sc.labels[id], sc.serials[l] = l, id
	return l
}

func (sc *scripted) uint32(s string) uint32 {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		sc.usage("%q is not a number", s)
	}
	return uint32(v)
}

// permString renders a mask as keyctl describe does: possessor, user,
// group and other, each as "alswrv" (setattr, link, search, write, read,
// view) with '-' for a right not granted.
func permString(p Perm) string {
	var b strings.Builder
	for shift := 24; shift >= 0; shift -= 8 {
		class := uint32(p) >> shift
		for i, letter := range "alswrv" {
			if class&(1<<(5-i)) != 0 {
				b.WriteRune(letter)
			} else {
				b.WriteByte('-')
			}
		}
	}
	return b.String()
}
