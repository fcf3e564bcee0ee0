package main

import (
	"os"
	"strings"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// pkeyInfo checks the trailing key=value options as pkey_parse_info does
// and joins them with single spaces into the parameter string.
func (a *app) pkeyInfo(opts []string) string {
	var b strings.Builder
	for _, o := range opts {
		if !strings.Contains(o, "=") {
			a.eprintf("Option not in key=val form\n")
			a.exit(2)
		}
		if len(o)+1 > 4096-1-b.Len() {
			a.eprintf("Too many info options\n")
			a.exit(2)
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o)
	}
	return b.String()
}

// pkeyKey resolves the key and refuses a password, as keyctl does.
func (a *app) pkeyKey(args []string) keyctl.Serial {
	id := a.getKeyID(args[1])
	if args[2] != "0" {
		a.eprintf("Password passing is not yet supported\n")
		a.exit(2)
	}
	return id
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
	info := a.pkeyInfo(args[3:])
	id := a.pkeyKey(args)
	q, err := a.c().PkeyQuery(id, info)
	if err != nil {
		a.fail("keyctl_pkey_query", err)
	}
	yn := func(bit uint32) byte {
		if q.SupportedOps&bit != 0 {
			return 'y'
		}
		return 'n'
	}
	a.printf("key_size=%d\nmax_data_size=%d\nmax_sig_size=%d\nmax_enc_size=%d\nmax_dec_size=%d\n",
		q.KeySize, q.MaxDataSize, q.MaxSigSize, q.MaxEncSize, q.MaxDecSize)
	a.printf("encrypt=%c\ndecrypt=%c\nsign=%c\nverify=%c\n",
		yn(keyctl.PkeySupportsEncrypt), yn(keyctl.PkeySupportsDecrypt), yn(keyctl.PkeySupportsSign), yn(keyctl.PkeySupportsVerify))
}

// pkeyData is pkey_encrypt, pkey_decrypt and pkey_sign: the data file
// read, the key queried with the same parameters for the output's size
// (keyctl sizes encrypt's output by max_dec_size, decrypt's by
// max_enc_size, sign's by max_sig_size), the operation, and its output
// written to stdout as it is.
func (a *app) pkeyData(args []string, name string, size func(client.PkeyQuery) uint16,
	op func(*client.Client, keyctl.Serial, string, []byte, int) ([]byte, error)) {
	if len(args) < 4 {
		a.format()
	}
	info := a.pkeyInfo(args[4:])
	id := a.pkeyKey(args)
	in := a.readFile(args[3])
	q, err := a.c().PkeyQuery(id, info)
	if err != nil {
		a.fail("keyctl_pkey_query", err)
	}
	out, err := op(a.c(), id, info, in, int(size(q)))
	if err != nil {
		a.fail(name, err)
	}
	a.write(out)
}

func (a *app) cmdPkeyEncrypt(args []string) {
	a.pkeyData(args, "keyctl_pkey_encrypt", func(q client.PkeyQuery) uint16 { return q.MaxDecSize }, (*client.Client).PkeyEncrypt)
}

func (a *app) cmdPkeyDecrypt(args []string) {
	a.pkeyData(args, "keyctl_pkey_decrypt", func(q client.PkeyQuery) uint16 { return q.MaxEncSize }, (*client.Client).PkeyDecrypt)
}

func (a *app) cmdPkeySign(args []string) {
	a.pkeyData(args, "keyctl_pkey_sign", func(q client.PkeyQuery) uint16 { return q.MaxSigSize }, (*client.Client).PkeySign)
}

func (a *app) cmdPkeyVerify(args []string) {
	if len(args) < 5 {
		a.format()
	}
	info := a.pkeyInfo(args[5:])
	id := a.pkeyKey(args)
	data := a.readFile(args[3])
	sig := a.readFile(args[4])
	if err := a.c().PkeyVerify(id, info, data, sig); err != nil {
		a.fail("keyctl_pkey_verify", err)
	}
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
