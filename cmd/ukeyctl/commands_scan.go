package main

import (
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

func (a *app) cmdShow(args []string) {
	hexIDs := false
	if len(args) >= 2 && args[1] == "-x" {
		hexIDs = true
		args = append([]string{args[0]}, args[2:]...)
	}
	if len(args) > 2 {
		a.format()
	}
	ring := keyctl.SessionKeyring
	name := "Session Keyring"
	if len(args) == 2 {
		ring = a.getKeyID(args[1])
		name = "Keyring"
	}
	a.printf("%s\n", name)
	id, err := a.c().GetKeyringID(ring, false)
	if err != nil {
		a.fail("Unable to dump key", err)
	}
	t := &treeDumper{a: a, hex: hexIDs}
	t.dump(id, 0, false)
}

// treeDumper is keyctl's dump_key_tree_aux, down to its shared indent
// buffer: each keyring writes its children's prefix into the buffer, and
// what deeper levels leave behind is what the next sibling inherits.
type treeDumper struct {
	a      *app
	hex    bool
	indent [64]byte
}

func (t *treeDumper) prefix() string {
	for i, c := range t.indent {
		if c == 0 {
			return string(t.indent[:i])
		}
	}
	return string(t.indent[:])
}

func (t *treeDumper) dump(key keyctl.Serial, depth int, more bool) int {
	a := t.a
	if depth > 8*4 {
		return 0
	}
	raw, err := a.c().Describe(key)
	if err != nil {
		a.printf("%d: key inaccessible (%s)\n", key, strerror(err))
		return 0
	}
	d, ok := parseDescription(raw)
	if !ok || len(d.typ) > 254 {
		a.eprintf("Unparsable description obtained for key %d\n", key)
		a.exit(3)
	}
	mask := a.prettyMask(d.perm, d.uid, d.gid)
	branch := ""
	if depth > 0 {
		branch = "\\_ "
	}
	if t.hex {
		a.printf("0x%08x %s  %5d %5d  %s%s%s: %s\n", uint32(key), mask, d.uid, d.gid, t.prefix(), branch, d.typ, d.desc)
	} else {
		a.printf("%10d %s  %5d %5d  %s%s%s: %s\n", key, mask, d.uid, d.gid, t.prefix(), branch, d.typ, d.desc)
	}
	kcount := 0
	if d.typ != "keyring" {
		return 0
	}
	data, err := a.c().Read(key)
	if err != nil {
		a.fail("keyctl_read_alloc", err)
	}
	ring := ringSerials(data)
	kcount = len(ring)
	for i, child := range ring {
		var rdepth int
		if depth == 0 {
			rdepth = depth
			t.indent[rdepth] = ' '
			rdepth++
			t.indent[rdepth] = 0
		} else {
			rdepth = depth
			for range 4 {
				t.indent[rdepth] = ' '
				rdepth++
			}
			t.indent[rdepth] = 0
		}
		if more {
			t.indent[depth] = '|'
		}
		kcount += t.dump(child, rdepth, i < len(ring)-1)
	}
	return kcount
}

// scanFunc is called for every key of a scanned tree, children before
// their keyring: parent is 0 for the root; raw is the key's description,
// or "" with err set if it could not be described.
type scanFunc func(parent, key keyctl.Serial, raw string, err error) int

// sessionScan is libkeyutils' recursive_session_key_scan.
func (a *app) sessionScan(f scanFunc) int {
	s, err := a.c().GetKeyringID(keyctl.SessionKeyring, false)
	if err != nil || s <= 0 {
		return 0
	}
	return a.keyScan(0, s, 0, f)
}

// errUnparsable stands for the errno libkeyutils reports for a
// description it cannot parse (it sets -EINVAL; only "not EACCES" counts).
var errUnparsable error = keyctl.EINVAL

func (a *app) keyScan(parent, key keyctl.Serial, depth int, f scanFunc) int {
	if depth > 800 {
		return 0
	}
	kcount := 0
	raw, err := a.c().Describe(key)
	if err == nil {
		d, ok := parseDescription(raw)
		if !ok {
			raw, err = "", errUnparsable
		} else if d.typ == "keyring" {
			if data, rerr := a.c().Read(key); rerr == nil {
				for _, child := range ringSerials(data) {
					kcount += a.keyScan(key, child, depth+1, f)
				}
			}
		}
	}
	return kcount + f(parent, key, raw, err)
}

func (a *app) cmdReap(args []string) {
	verbose := false
	if len(args) > 1 && args[1] == "-v" {
		verbose = true
		args = append([]string{args[0]}, args[2:]...)
	}
	if len(args) != 1 {
		a.format()
	}
	n := a.sessionScan(func(parent, key keyctl.Serial, _ string, err error) int {
		if err == nil || errnoOf(err) == keyctl.EACCES {
			return 0
		}
		if verbose {
			a.printf("Reap %d", key)
		}
		if uerr := a.c().Unlink(key, parent); uerr != nil {
			if verbose {
				a.printf("... failed %s\n", strerror(uerr))
			}
			return 0
		}
		if verbose {
			a.printf("\n")
		}
		return 1
	})
	a.printf("%d keys reaped\n", n)
}

func (a *app) cmdPurge(args []string) {
	args = args[1:]
	search, prefix, caseless := false, false, false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch opt := args[0] + "\x00"; opt[1] {
		case 's':
			search = true
		case 'p':
			prefix = true
		case 'i':
			caseless = true
		default:
			a.format()
		}
		args = args[1:]
	}
	if len(args) < 1 {
		a.format()
	}
	typ := args[0]
	desc := ""
	if len(args) > 1 {
		desc = args[1]
	}
	var f scanFunc
	switch {
	case search:
		if len(args) != 2 || prefix || caseless {
			a.format()
		}
		f = func(_, ring keyctl.Serial, raw string, _ error) int {
			if !strings.HasPrefix(raw, "keyring;") {
				return 0
			}
			n := 0
			for {
				key, err := a.c().Search(ring, typ, desc, 0)
				if err != nil {
					key = -1
				}
				if a.c().Unlink(key, ring) != nil {
					return n
				}
				n++
			}
		}
	case len(args) == 1:
		if prefix || caseless {
			a.format()
		}
		f = func(parent, key keyctl.Serial, raw string, err error) int {
			if parent == 0 || err != nil {
				return 0
			}
			i := strings.IndexByte(raw, ';')
			if i < 0 || raw[:i] != typ {
				return 0
			}
			if a.c().Unlink(key, parent) != nil {
				return 0
			}
			return 1
		}
	case len(args) == 2:
		f = func(parent, key keyctl.Serial, raw string, err error) int {
			if parent == 0 || err != nil {
				return 0
			}
			i := strings.IndexByte(raw, ';')
			if i < 0 || raw[:i] != typ {
				return 0
			}
			j := strings.LastIndexByte(raw[i+1:], ';')
			if j < 0 {
				return 0
			}
			kdesc := raw[i+1+j+1:]
			if prefix {
				if len(kdesc) < len(desc) {
					return 0
				}
			} else if len(kdesc) != len(desc) {
				return 0
			}
			head := kdesc[:len(desc)]
			if caseless {
				if !asciiEqualFold(head, desc) {
					return 0
				}
			} else if head != desc {
				return 0
			}
			a.printf("%s '%s'\n", typ, kdesc)
			if a.c().Unlink(key, parent) != nil {
				return 0
			}
			return 1
		}
	default:
		a.format()
	}
	n := a.sessionScan(f)
	a.printf("purged %d keys\n", n)
}

// asciiEqualFold is strncasecmp in the C locale over equal lengths.
func asciiEqualFold(x, y string) bool {
	if len(x) != len(y) {
		return false
	}
	for i := 0; i < len(x); i++ {
		cx, cy := x[i], y[i]
		if 'A' <= cx && cx <= 'Z' {
			cx += 'a' - 'A'
		}
		if 'A' <= cy && cy <= 'Z' {
			cy += 'a' - 'A'
		}
		if cx != cy {
			return false
		}
	}
	return true
}
