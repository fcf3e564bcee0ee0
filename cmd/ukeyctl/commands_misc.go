package main

import (
	"os"
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

// errNoPkey is the answer to public-key operations: ukeys has no
// asymmetric key type, so ukeyctl answers as a kernel without one does.
var errNoPkey = keyctl.EOPNOTSUPP

// pkeyInfo checks the trailing key=value options as pkey_parse_info does.
func (a *app) pkeyInfo(opts []string) {
	n := 0
	for _, o := range opts {
		if !strings.Contains(o, "=") {
			a.eprintf("Option not in key=val form\n")
			a.exit(2)
		}
		if len(o)+1 > 4096-1-n {
			a.eprintf("Too many info options\n")
			a.exit(2)
		}
		if n > 0 {
			n++
		}
		n += len(o)
	}
}

// pkeyKey resolves the key and refuses a password, as keyctl does.
func (a *app) pkeyKey(args []string) {
	a.getKeyID(args[1])
	if args[2] != "0" {
		a.eprintf("Password passing is not yet supported\n")
		a.exit(2)
	}
}

// readFile reads a data file as keyctl's read_file does.
func (a *app) readFile(name string) []byte {
	b, err := os.ReadFile(name)
	if err != nil {
		a.fail(name, err)
	}
	return b
}

func (a *app) cmdPkeyQuery(args []string) {
	if len(args) < 3 {
		a.format()
	}
	a.pkeyInfo(args[3:])
	a.pkeyKey(args)
	a.fail("keyctl_pkey_query", errNoPkey)
}

func (a *app) pkeyData(args []string) {
	if len(args) < 4 {
		a.format()
	}
	a.pkeyInfo(args[4:])
	a.pkeyKey(args)
	a.readFile(args[3])
	a.fail("keyctl_pkey_query", errNoPkey)
}

func (a *app) cmdPkeyEncrypt(args []string) { a.pkeyData(args) }
func (a *app) cmdPkeyDecrypt(args []string) { a.pkeyData(args) }
func (a *app) cmdPkeySign(args []string)    { a.pkeyData(args) }

func (a *app) cmdPkeyVerify(args []string) {
	if len(args) < 5 {
		a.format()
	}
	a.pkeyInfo(args[5:])
	a.pkeyKey(args)
	a.readFile(args[3])
	a.readFile(args[4])
	a.fail("keyctl_pkey_verify", errNoPkey)
}

// testCommands are keyctl --test's subcommands.
var testCommands []command

func init() {
	testCommands = []command{
		{"limits", "", (*app).cmdTestLimits},
		{"limits2", "", (*app).cmdTestLimits2},
	}
}

func (a *app) testFormat() {
	a.eprintf("Format:\n")
	for _, c := range testCommands {
		a.eprintf("  keyctl --test %s %s\n", c.name, c.format)
	}
	a.eprintf("\n")
	a.keyIDLegend()
	a.exit(2)
}

func (a *app) cmdTest(args []string) {
	if len(args) < 2 {
		a.testFormat()
	}
	a.doCommand(args, testCommands, "test ")
}

// cmdTestLimits checks the type and description length limits of add_key.
func (a *app) cmdTestLimits(args []string) {
	if len(args) != 1 {
		a.testFormat()
	}
	a.unbuf = true
	buf := make([]byte, 8192)
	fails := 0
	failed := func(format string, v ...any) {
		a.printf("\n")
		a.eprintf(format, v...)
		fails++
	}
	for i := range buf {
		if i%32 == 0 {
			if i != 0 {
				a.printf("\n")
			}
			a.printf("TEST SIZE %d", i)
		}
		a.printf(".")
		if _, err := a.c().AddKey(string(buf[:i]), "wibble", []byte("a"), keyctl.ThreadKeyring); err != nil {
			want := keyctl.ENODEV
			if i == 0 || i >= 32 {
				want = keyctl.EINVAL
			}
			if errnoOf(err) != want {
				failed("%d type failed: %s\n", i, strerror(err))
			}
		} else {
			failed("%d type unexpectedly succeeded\n", i)
		}
		a.printf("_")
		key, err := a.c().AddKey("user", string(buf[:i]), []byte("a"), keyctl.ThreadKeyring)
		switch {
		case err != nil && (i == 0 || i >= 4096):
			if errnoOf(err) != keyctl.EINVAL {
				failed("%d desc failed: %s\n", i, strerror(err))
			}
		case err != nil:
			failed("%d desc wrong error: %s\n", i, strerror(err))
		default:
			if i == 0 || i >= 4096 {
				failed("%d desc unexpectedly succeeded\n", i)
			}
			if uerr := a.c().Unlink(key, keyctl.ThreadKeyring); uerr != nil {
				failed("Unlink failed: %s\n", strerror(uerr))
			}
		}
		buf[i] = 'a'
		if fails > 20 {
			a.eprintf("Aborting with too many failures\n")
			a.exit(1)
		}
	}
	a.printf("\n")
	if fails > 0 {
		a.exit(1)
	}
}

// cmdTestLimits2 checks the payload length limits of add_key.
func (a *app) cmdTestLimits2(args []string) {
	if len(args) != 1 {
		a.testFormat()
	}
	a.unbuf = true
	buf := make([]byte, 1030*1024)
	fails := 0
	failed := func(format string, v ...any) {
		a.printf("\n")
		a.eprintf(format, v...)
		fails++
	}
	for i := range buf {
		if i%2048 == 0 {
			if i != 0 {
				a.printf("\n")
			}
			a.printf("TEST SIZE %7d ", i)
		}
		if i%(2048/32) == 0 {
			a.printf(".")
		}
		key, err := a.c().AddKey("user", "a", buf[:i], keyctl.ThreadKeyring)
		switch {
		case err != nil && (i == 0 || i > 32767):
			if errnoOf(err) != keyctl.EINVAL {
				failed("%d desc failed: %s\n", i, strerror(err))
			}
		case err != nil && errnoOf(err) == keyctl.EDQUOT:
		case err != nil:
			failed("%d desc wrong error: %s\n", i, strerror(err))
		default:
			if i == 0 || i > 32767 {
				failed("%d desc unexpectedly succeeded\n", i)
			}
			if uerr := a.c().Unlink(key, keyctl.ThreadKeyring); uerr != nil {
				failed("Unlink failed: %s\n", strerror(uerr))
			}
		}
		if fails > 20 {
			a.eprintf("Aborting with too many failures\n")
			a.exit(1)
		}
	}
	a.printf("\n")
	if fails > 0 {
		a.exit(1)
	}
}
