package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// Fuzz targets for every argument parser of ukeyctl, the special keyring
// name syntax and request-key.conf. Their seeds (f.Add and
// testdata/fuzz/) run in the normal suite; `go test -fuzz FuzzX` explores.

// fuzzSecret is a logon payload that no command may ever print.
var fuzzSecret = []byte("FUZZ-LOGON-SECRET-d41c8e")

var (
	fuzzOnce sync.Once
	fuzzSvc  *keys.Service
	fuzzCl   *client.Client
)

// fuzzClient is an in-process daemon shared by the fuzz targets of this
// process, holding a few keys to find, and the logon secret.
func fuzzClient(f *testing.F) *client.Client {
	fuzzOnce.Do(func() {
		fuzzSvc = keys.New()
		fuzzCl = client.New(server.NewLocal(fuzzSvc, keys.Cred{UID: 0, GID: 0, PID: os.Getpid()}))
		fuzzCl.JoinSessionKeyring(nil)
		ring, _ := fuzzCl.AddKey("keyring", "fuzzring", nil, keys.SessionKeyring)
		fuzzCl.AddKey("user", "fuzzkey", []byte("fuzz payload"), ring)
		fuzzCl.AddKey("logon", "fuzz:secret", fuzzSecret, keys.SessionKeyring)
	})
	return fuzzCl
}

// closeFuzz releases the shared daemon; TestMain's goleak check would
// otherwise see its goroutines.
func closeFuzz() {
	if fuzzCl != nil {
		fuzzCl.Close()
		fuzzSvc.Close()
		fuzzCl, fuzzSvc, fuzzOnce = nil, nil, sync.Once{}
	}
}

// runApp is Main for an app that talks to cl: it returns the exit status
// and what was printed, and fails the test on any panic but exit's.
func runApp(t *testing.T, cl *client.Client, argv []string, stdin []byte) (code int, out, errOut string) {
	var stdout, stderr bytes.Buffer
	a := &app{prog: "keyctl", stdin: bytes.NewReader(stdin), rawOut: &stdout, stderr: &stderr, cl: cl}
	a.out = bufio.NewWriterSize(&stdout, 4096)
	func() {
		defer func() {
			if r := recover(); r != nil {
				ec, ok := r.(exitCode)
				if !ok {
					t.Fatalf("%q panicked: %v", argv, r)
				}
				code = int(ec)
			}
			a.out.Flush()
		}()
		a.doCommand(argv, commands, "")
	}()
	return code, stdout.String(), stderr.String()
}

// exits runs f, which may end with a.exit, and returns the exit status
// (-1 if it returned).
func exits(t *testing.T, f func()) (code int) {
	code = -1
	defer func() {
		if r := recover(); r != nil {
			ec, ok := r.(exitCode)
			if !ok {
				t.Fatalf("panicked: %v", r)
			}
			code = int(ec)
		}
	}()
	f()
	return code
}

// fuzzCommands are the commands fuzzed with arbitrary arguments: all but
// those that start programs (session, new_session, watch_session,
// request-key), block on notifications (watch) or read named files
// (pkey_*).
var fuzzCommands = []string{
	"--version", "add", "chgrp", "chown", "clear", "describe", "dh_compute", "dh_compute_kdf",
	"dh_compute_kdf_oi", "get_persistent", "id", "instantiate", "invalidate", "link", "list", "move",
	"negate", "newring", "padd", "pinstantiate", "pipe", "prequest2", "print", "pupdate", "purge",
	"rdescribe", "read", "reap", "reject", "request", "request2", "restrict_keyring", "revoke",
	"rlist", "search", "security", "setperm", "show", "supports", "timeout", "unlink", "update",
	"proc", "status", "sysctl", "nosuchcommand",
}

func FuzzCommandArgs(f *testing.F) {
	cl := fuzzClient(f)
	f.Cleanup(closeFuzz)
	for i, seed := range []string{
		"user\x00k\x00v\x00@s", "%user:fuzzkey", "@s", "%:fuzzring", "0x7fffffff", "@u\x00%:fuzzring",
		"-x\x00user\x00k\x0041\x00@s", "%logon:fuzz:secret", "@q", "%", "%:", "%user", "-1\x00-1",
		"@s\x00user\x00fuzz", "-v\x00@s", "5\x00@s\x00@u", "-f\x00@s\x00@u\x00@p", "maxkeys=1",
	} {
		f.Add(uint8(i*7), seed, []byte("stdin data"))
	}
	f.Fuzz(func(t *testing.T, which uint8, args string, stdin []byte) {
		cmd := fuzzCommands[int(which)%len(fuzzCommands)]
		if cmd == "sysctl" && strings.Contains(args, "=") {
			return // tunables would then starve every later run
		}
		argv := []string{"keyctl", cmd}
		if args != "" {
			argv = append(argv, strings.Split(args, "\x00")...)
		}
		code, out, errOut := runApp(t, cl, argv, stdin)
		// keyctl's statuses: 0, 1 failure, 2 usage; "supports" answers 3
		// for a capability it does not know.
		if code < 0 || code > 2 && !(code == 3 && cmd == "supports") {
			t.Fatalf("%q exited %d", argv, code)
		}
		if bytes.Contains([]byte(out+errOut), fuzzSecret) || strings.Contains(out, fmt.Sprintf("%x", fuzzSecret)) {
			t.Fatalf("%q printed the logon payload", argv)
		}
	})
}

// The special keyring names (@t @p @s @u @us @g @a), %type:name and
// %:name, and numeric ids: what parses is what keyctl's get_key_id gives,
// the rest ends with status 2 (bad syntax) or 1 (no such key).
func FuzzKeyID(f *testing.F) {
	cl := fuzzClient(f)
	f.Cleanup(closeFuzz)
	for _, s := range []string{"@t", "@p", "@s", "@u", "@us", "@g", "@a", "@x", "@", "%", "%:", "%:fuzzring",
		"%user:fuzzkey", "%user:", "%:x:y", "%user", "123", "0x1f", "-3", "017", "08", " 5", "5 ", "99999999999999999999", ""} {
		f.Add(s)
	}
	special := map[string]keys.Serial{"@t": keys.ThreadKeyring, "@p": keys.ProcessKeyring, "@s": keys.SessionKeyring,
		"@u": keys.UserKeyring, "@us": keys.UserSessionKeyring, "@g": keys.GroupKeyring, "@a": keys.ReqKeyAuthKey}
	f.Fuzz(func(t *testing.T, arg string) {
		var stderr bytes.Buffer
		a := &app{prog: "keyctl", stderr: &stderr, cl: cl, out: bufio.NewWriter(io.Discard)}
		var id keys.Serial
		code := exits(t, func() { id = a.getKeyID(arg) })
		switch {
		case code == -1 && strings.HasPrefix(arg, "@"):
			if want, ok := special[arg]; !ok || id != want {
				t.Fatalf("%q = %d", arg, id)
			}
		case code == -1 && strings.HasPrefix(arg, "%"):
			if id <= 0 {
				t.Fatalf("%q found %d", arg, id)
			}
		case code == -1:
			v, rest, _ := strtoul(arg, 0)
			if rest != "" || id != keys.Serial(int32(uint32(v))) {
				t.Fatalf("%q = %d", arg, id)
			}
		case code == 2 || code == 1 && strings.HasPrefix(arg, "%"):
		default:
			t.Fatalf("%q exited %d: %s", arg, code, stderr.String())
		}
	})
}

var plainNumber = regexp.MustCompile(`^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$`)

// strtoul agrees with strconv where both apply, and always returns a
// suffix of its input.
func FuzzStrtoul(f *testing.F) {
	for _, s := range []string{"123", "0x1f", "017", "08", "-1", "  +7z", "", "0x", "18446744073709551615", "18446744073709551616", "\t-0x10"} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(10))
		f.Add(s, uint8(16))
	}
	f.Fuzz(func(t *testing.T, s string, b uint8) {
		base := []int{0, 8, 10, 16}[b%4]
		v, rest, overflow := strtoul(s, base)
		if !strings.HasSuffix(s, rest) {
			t.Fatalf("rest %q is not a suffix of %q", rest, s)
		}
		if base == 0 && plainNumber.MatchString(s) {
			w, err := strconv.ParseUint(s, 0, 64)
			if overflow != (err != nil) || !overflow && (v != w || rest != "") {
				t.Fatalf("strtoul(%q) = %d, %q, %v; strconv: %d, %v", s, v, rest, overflow, w, err)
			}
		}
		_ = atoi(s) // never panics
		// The typed parsers: uids, gids, permission masks, timeouts.
		a := &app{stderr: io.Discard, out: bufio.NewWriter(io.Discard)}
		for _, p := range []func(){func() { a.idArg(s, "uid") }, func() { a.timeoutArg(s) }} {
			if c := exits(t, p); c != -1 && c != 2 {
				t.Fatalf("parsing %q exited %d", s, c)
			}
		}
	})
}

// Descriptions ("type;uid;gid;perm;desc"), /proc/keys lines and getopt
// option lists: no input panics, and what parses is part of the input.
func FuzzParsers(f *testing.F) {
	f.Add("user;0;0;3f010000;desc", "-x\x00-v\x00a", "D:dlnv")
	f.Add("keyring;-1;4294967295;1f3f0000;_uid.0", "--\x00-x", "+x")
	f.Add("1a2b3c4d I--Q---     1 perm 3f010000     0     0 user      fuzzkey: 12", "-Dfoo\x00-", "D:")
	f.Add(";;;;", "-", ":")
	f.Fuzz(func(t *testing.T, s, args, optstring string) {
		if d, ok := parseDescription(s); ok {
			if !strings.HasPrefix(s, d.typ+";") || !strings.HasSuffix(s, d.desc) {
				t.Fatalf("parseDescription(%q) = %+v", s, d)
			}
		}
		if _, typ, desc, ok := parseProcKeysLine(s); ok && (!strings.Contains(s, typ) || !strings.HasSuffix(s, desc)) {
			t.Fatalf("parseProcKeysLine(%q) = %q %q", s, typ, desc)
		}
		for _, l := range procLines(s) {
			if len(l) > 1023 {
				t.Fatalf("procLines gave a %d-byte line", len(l))
			}
		}
		a := &app{stderr: io.Discard, out: bufio.NewWriter(io.Discard)}
		argv := append([]string{"keyctl"}, strings.Split(args, "\x00")...)
		opts, operands, _ := a.getopt(argv, optstring)
		for _, o := range opts {
			if o.c == ':' || !strings.Contains(optstring, string(o.c)) {
				t.Fatalf("getopt(%q, %q) gave option %q", argv, optstring, o.c)
			}
		}
		if len(operands) > len(argv) {
			t.Fatalf("getopt(%q) gave %d operands", argv, len(operands))
		}
		var w watchFilter
		exits(t, func() { a.parseFilter(&w, s) })
	})
}

// request-key.conf: any file, any request. The helper runs in debug mode
// (it prints the command instead of executing it) against the in-process
// daemon, which serves %{type:description} macros. It ends with status 0
// (a line matched) or 1 (none did, or the file is bad), never otherwise;
// and a line whose four fields equal the request's exactly always matches
// with no wildcard.
func FuzzRequestKeyConf(f *testing.F) {
	cl := fuzzClient(f)
	f.Cleanup(closeFuzz)
	dir := f.TempDir()
	f.Add("create user * * /bin/echo %k %d\n", "create", "user", "debug:1", "info")
	f.Add("create * debug:* * |/bin/cat %c\ncreate user debug:1 info /bin/true\n", "create", "user", "debug:1", "info")
	f.Add("# comment\n\n  indented\ncreate user * * /bin/x %{user:fuzzkey}\n", "create", "user", "a", "")
	f.Add("create user * * /bin/x %{user:}\n", "create", "user", "a", "")
	f.Add("create user * * /bin/x %q\n", "create", "user", "a", "")
	f.Add("create user\n", "create", "user", "a", "")
	f.Add("negate * * * /bin/x %%\n", "negate", "logon", "a:b", "x")
	f.Add("create a*b *c d* * /bin/x\n", "create", "aXb", "Yc", "dZ")
	f.Fuzz(func(t *testing.T, conf, op, typ, desc, callout string) {
		file := filepath.Join(dir, "request-key.conf")
		simple := func(s string) bool {
			return s != "" && !strings.ContainsAny(s, " \t\n\v\f\r*#%\x00")
		}
		exact := simple(op) && simple(typ) && simple(desc) && simple(callout)
		if exact {
			conf += fmt.Sprintf("\n%s %s %s %s /bin/exact\n", op, typ, desc, callout)
		}
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		a := &app{prog: "request-key", stderr: io.Discard, rawOut: &stdout, cl: cl}
		a.out = bufio.NewWriter(&stdout)
		r := &reqKey{a: a, debugMode: true, noLog: true}
		r.cmdWildness = [4]uint{^uint(0), ^uint(0), ^uint(0), ^uint(0)}
		p := &reqParams{op: op, keyType: typ, keyDesc: desc, calloutInfo: callout, key: "123", uid: "0", gid: "0",
			thread: "0", process: "0", session: "0"}
		scanned := exits(t, func() { r.scanConfFile(p, file) })
		if scanned != -1 && scanned != 1 {
			t.Fatalf("scanning exited %d", scanned)
		}
		if scanned == -1 && exact && (!r.found || r.cmdWildness != [4]uint{}) {
			t.Fatalf("the exact line did not win: found %v, wildness %v", r.found, r.cmdWildness)
		}
		if scanned != -1 || !r.found {
			return
		}
		code := exits(t, func() { r.executeProgram(p, r.cmd) })
		a.out.Flush()
		if code != 0 && code != 1 {
			t.Fatalf("executing %q exited %d", r.cmd, code)
		}
		if code == 0 && !strings.Contains(stdout.String(), "-- exec disabled --") {
			t.Fatalf("executing %q in debug mode printed %q", r.cmd, stdout.String())
		}
	})
}
