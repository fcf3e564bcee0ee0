package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, datum string
		ok             bool
		wild           uint
	}{
		{"user", "user", true, 0},
		{"user", "users", false, 0},
		{"*", "anything", true, 8},
		{"*", "", true, 0},
		{"debug:*", "debug:foo", true, 3},
		{"debug:*", "debug:", true, 0},
		{"debug:*", "debug", false, 0},
		{"*:foo", "debug:foo", true, 5},
		{"*:foo", "debug:bar", false, 0},
		{"a*z", "abcz", true, 2},
		{"a*z", "az", true, 0},
		{"a*z", "abc", false, 0},
		{"abc*abc", "abc", false, 0},
		{"a*b*c", "aXb*c", true, 1},
	} {
		var w uint
		ok := match(c.pattern, c.datum, &w)
		if ok != c.ok || ok && w != c.wild {
			t.Errorf("match(%q, %q) = %v, wildness %d; want %v, %d", c.pattern, c.datum, ok, w, c.ok, c.wild)
		}
	}
}

// writeConf writes the main configuration file and drop-ins, and points
// UKEYS_REQUEST_KEY_CONF at it.
func writeConf(t *testing.T, dir, main string, dropIns map[string]string) string {
	t.Helper()
	conf := filepath.Join(dir, "request-key.conf")
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(dropIns) > 0 {
		d := filepath.Join(dir, "request-key.d")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range dropIns {
			if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("UKEYS_REQUEST_KEY_CONF", conf)
	return conf
}

// The choice of line and the expansion of macros, seen through
// request-key's debug mode (-d: describe and exec nothing, -v: say what
// it would do, -n: no syslog).
func TestRequestKeySelection(t *testing.T) {
	dir := t.TempDir()
	writeConf(t, dir, `# comment
create  user    *         *      /bin/generic %k
create  user    debug:*   *      /bin/debug %o %k %t %d %c %u %g %T %P %S %% %%k %zz
create  user    debug:1*  *      /bin/debug1 %d
create  user    debug:1234 *     /bin/exact %d
negate  *       *         *      /bin/negate %k
`, map[string]string{
		"10-callout.conf": "create user debug:1234 info /bin/dropin %c\n",
		"skipped.txt":     "create * * * /bin/never\n",
		".hidden.conf":    "create * * * /bin/never\n",
	})
	for _, c := range []struct {
		desc, info string
		argv       []string
	}{
		{"user;0;0;1f0000;debug:1234", "x", []string{"exact", "debug:1234"}},
		{"user;0;0;1f0000;debug:1234", "info", []string{"dropin", "info"}},
		{"user;0;0;1f0000;debug:1999", "x", []string{"debug1", "debug:1999"}},
		{"user;0;0;1f0000;debug:xy", "callout", []string{"debug", "create", "42", "user", "debug:xy", "callout",
			"1000", "1001", "11", "12", "13", "%", "%k", "%zz"}},
		{"user;0;0;1f0000;other", "x", []string{"generic", "42"}},
	} {
		r := run("ukeyctl", "", "request-key", "-d", "-v", "-n", "-D", c.desc,
			"create", "42", "1000", "1001", "11", "12", "13", c.info)
		if r.Code != 0 || r.Stdout != "-- exec disabled --\n" {
			t.Fatalf("%s: %+v", c.desc, r)
		}
		var argv []string
		for _, line := range strings.Split(r.Stderr, "\n") {
			if _, v, ok := strings.Cut(line, "] = \""); ok && strings.HasPrefix(line, "- argv[") {
				argv = append(argv, strings.TrimSuffix(v, "\""))
			}
		}
		if strings.Join(argv, " ") != strings.Join(c.argv, " ") {
			t.Errorf("%s %s: argv %q, want %q\n%s", c.desc, c.info, argv, c.argv, r.Stderr)
		}
	}
	r := run("ukeyctl", "", "request-key", "-d", "-n", "-D", "keyring;0;0;1f0000;x", "create", "42", "0", "0", "0", "0", "0", "i")
	if r.Code != 1 || r.Stdout != "" || r.Stderr != "" {
		t.Errorf("no matching line: %+v", r)
	}
	r = run("ukeyctl", "", "request-key", "-d", "-v", "-n", "-D", "keyring;0;0;1f0000;x", "create", "42", "0", "0", "0", "0", "0", "i")
	if r.Code != 1 || !strings.HasSuffix(r.Stderr, "request-key.conf: No matching action\n") {
		t.Errorf("no matching line, verbose: %+v", r)
	}
	r = run("ukeyctl", "", "request-key", "-v", "-n", "create", "42")
	if r.Code != 1 || r.Stderr != "Unexpected argument count: 2\n" {
		t.Errorf("bad argument count: %+v", r)
	}
	r = run("ukeyctl", "", "request-key", "--version")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "request-key from ukeys ") {
		t.Errorf("--version: %+v", r)
	}
}

func TestRequestKeyConfErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ conf, want string }{
		{"create user\n", "request-key.conf:1: Syntax error"},
		{"create user * *\n", "request-key.conf:1: Syntax error"},
		{"create user * * /bin/x %q\n", "request-key.conf:1: Unsupported macro"},
		{"create user * * /bin/x %\n", "request-key.conf:1: Missing macro name"},
		{"create user * * /bin/x %{user}\n", "request-key.conf:1: Keysub macro lacks ':'"},
		{"create user * * /bin/x %{user:a\n", "request-key.conf:1: Unterminated keysub macro"},
		{"create user * * /bin/x %{user:a}b\n", "request-key.conf:1: Keysub macro has trailing rubbish"},
		{"create user * * /bin/x %{:a}\n", "request-key.conf:1: Keysub type empty"},
		{"# only a comment\n\n", "request-key.conf: No matching action"},
	} {
		writeConf(t, dir, c.conf, nil)
		r := run("ukeyctl", "", "request-key", "-d", "-v", "-n", "create", "42", "0", "0", "0", "0", "0", "info")
		if r.Code != 1 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", c.conf, r.Code, r.Stderr, c.want)
		}
	}
}

// startDaemonWithHelper starts a daemon whose request-key upcalls run
// `ukeyctl request-key` (the test binary) with the configuration conf.
func startDaemonWithHelper(t *testing.T, conf, bin string) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{dir: dir, path: filepath.Join(dir, "ukeyd.sock"), done: make(chan error, 1)}
	helper := filepath.Join(dir, "helper.sh")
	script := fmt.Sprintf("#!/bin/sh\nUKEYS_REQUEST_KEY_CONF=%s GORACE=atexit_sleep_ms=0 exec %s request-key -n \"$@\"\n",
		shellQuote(conf), shellQuote(filepath.Join(bin, "ukeyctl")))
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return d.start(t, ukeystest.WithHelper(helper), ukeystest.WithKeys(keys.WithUpcallTimeout(20*time.Second)))
}

func TestRequestKeyUpcall(t *testing.T) {
	bin := binDir(t, "ukeyctl", "keyctl")
	k := filepath.Join(bin, "keyctl")
	conf := writeConf(t, t.TempDir(), `
create user inst:*   *  `+k+` instantiate %k %c %S
create user neg:*    *  `+k+` negate %k 30 %S
create user rej:*    *  `+k+` reject %k 30 rejected %S
create user pipe:*   *  |/bin/cat
create user args:*   *  |/bin/echo %o %t %d %c
create user sub:*    *  |/bin/echo %{user:subsrc}
create user fail:*   *  |/bin/false
negate user fail:*   *  `+k+` reject %k 30 expired %S
`, nil)
	d := startDaemonWithHelper(t, conf, bin)
	d.shell(t)
	mustRun(t, "add", "user", "subsrc", "subval", "@s")
	for _, c := range []struct {
		desc, info string
		code       int
		print, err string
	}{
		{"inst:a", "hello", 0, "hello\n", ""},
		{"pipe:a", "piped", 0, "piped\n", ""},
		{"args:a", "info", 0, ":hex:637265617465207573657220617267733a6120696e666f0a\n", ""},
		{"sub:a", "x", 0, ":hex:73756276616c0a\n", ""},
		{"neg:a", "x", 1, "", "request_key: Required key not available\n"},
		{"rej:a", "x", 1, "", "request_key: Key was rejected by service\n"},
		{"fail:a", "x", 1, "", "request_key: Key has expired\n"},
		{"nomatch:a", "x", 1, "", "request_key: Required key not available\n"},
	} {
		r := run("keyctl", "", "request2", "user", c.desc, c.info, "@s")
		if r.Code != c.code || r.Stderr != c.err {
			t.Errorf("request2 %s: %+v; want exit %d, stderr %q", c.desc, r, c.code, c.err)
			continue
		}
		if c.code != 0 {
			// The negative key answers later requests without an upcall.
			if r2 := run("keyctl", "", "request", "user", c.desc); r2.Stderr != c.err {
				t.Errorf("request %s after failure: %+v", c.desc, r2)
			}
			continue
		}
		if p := run("keyctl", "", "print", strings.TrimSpace(r.Stdout)); p.Stdout != c.print {
			t.Errorf("print %s = %+v, want %q", c.desc, p, c.print)
		}
	}
	// prequest2 reads the callout information from stdin; the key found
	// is the one constructed before.
	r := run("keyctl", "info2", "prequest2", "user", "inst:b")
	if r.Code != 0 {
		t.Fatalf("prequest2: %+v", r)
	}
	if p := run("keyctl", "", "print", "%user:inst:b"); p.Stdout != "info2\n" {
		t.Errorf("print after prequest2: %+v", p)
	}
}
