package main

import (
	"encoding/binary"

	"github.com/ukeys/ukeys/keyctl"
)

// version is the ukeys release this ukeyctl belongs to (set with
// -ldflags "-X main.version=...").
var version = "0.1.0"

// keyutilsVersion is the keyctl whose behaviour ukeyctl follows.
const keyutilsVersion = "keyutils-1.6.3"

func (a *app) cmdVersion(args []string) {
	a.printf("keyctl from ukeys %s (%s compatible)\n", version, keyutilsVersion)
	a.exit(0)
}

// shiftX removes a leading "-x" argument (after the command name).
func shiftX(args []string) ([]string, bool) {
	if len(args) > 1 && args[1] == "-x" {
		return append([]string{args[0]}, args[2:]...), true
	}
	return args, false
}

func (a *app) cmdID(args []string) {
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	id, err := a.c().GetKeyringID(key, false)
	if err != nil {
		a.fail("keyctl_get_keyring_ID", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdAdd(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 5 {
		a.format()
	}
	data := a.hex2bin([]byte(args[3]), asHex)
	dest := a.getKeyID(args[4])
	id, err := a.c().AddKey(args[1], args[2], data, dest)
	clear(data)
	if err != nil {
		a.fail("add_key", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdPadd(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 4 {
		a.format()
	}
	data := a.hex2bin(a.grabStdin(), asHex)
	dest := a.getKeyID(args[3])
	id, err := a.c().AddKey(args[1], args[2], data, dest)
	clear(data)
	if err != nil {
		a.fail("add_key", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdRequest(args []string) {
	if len(args) != 3 && len(args) != 4 {
		a.format()
	}
	var dest keyctl.Serial
	if len(args) == 4 {
		dest = a.getKeyID(args[3])
	}
	id, err := a.c().RequestKey(args[1], args[2], nil, dest)
	if err != nil {
		a.fail("request_key", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdRequest2(args []string) {
	if len(args) != 4 && len(args) != 5 {
		a.format()
	}
	var dest keyctl.Serial
	if len(args) == 5 {
		dest = a.getKeyID(args[4])
	}
	id, err := a.c().RequestKey(args[1], args[2], []byte(args[3]), dest)
	if err != nil {
		a.fail("request_key", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdPrequest2(args []string) {
	if len(args) != 3 && len(args) != 4 {
		a.format()
	}
	info := cString(a.grabStdin())
	next := []string{args[0], args[1], args[2], info}
	if len(args) == 4 {
		next = append(next, args[3])
	}
	a.cmdRequest2(next)
}

func (a *app) cmdUpdate(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 3 {
		a.format()
	}
	data := a.hex2bin([]byte(args[2]), asHex)
	key := a.getKeyID(args[1])
	err := a.c().Update(key, data)
	clear(data)
	if err != nil {
		a.fail("keyctl_update", err)
	}
}

func (a *app) cmdPupdate(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	data := a.hex2bin(a.grabStdin(), asHex)
	err := a.c().Update(key, data)
	clear(data)
	if err != nil {
		a.fail("keyctl_update", err)
	}
}

func (a *app) cmdNewring(args []string) {
	if len(args) != 3 {
		a.format()
	}
	dest := a.getKeyID(args[2])
	id, err := a.c().AddKey("keyring", args[1], nil, dest)
	if err != nil {
		a.fail("add_key", err)
	}
	a.printf("%d\n", id)
}

// oneKey runs a command of the form "<cmd> <key>" calling op.
func (a *app) oneKey(args []string, msg string, op func(keyctl.Serial) error) {
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	if err := op(key); err != nil {
		a.fail(msg, err)
	}
}

func (a *app) cmdRevoke(args []string) {
	a.oneKey(args, "keyctl_revoke", func(k keyctl.Serial) error { return a.c().Revoke(k) })
}

func (a *app) cmdClear(args []string) {
	a.oneKey(args, "keyctl_clear", func(k keyctl.Serial) error { return a.c().Clear(k) })
}

func (a *app) cmdInvalidate(args []string) {
	a.oneKey(args, "keyctl_invalidate", func(k keyctl.Serial) error { return a.c().Invalidate(k) })
}

func (a *app) cmdLink(args []string) {
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	ring := a.getKeyID(args[2])
	if err := a.c().Link(key, ring); err != nil {
		a.fail("keyctl_link", err)
	}
}

func (a *app) cmdUnlink(args []string) {
	if len(args) != 2 && len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	if len(args) == 3 {
		ring := a.getKeyID(args[2])
		if err := a.c().Unlink(key, ring); err != nil {
			a.fail("keyctl_unlink", err)
		}
		return
	}
	n := a.sessionScan(func(parent, k keyctl.Serial, _ string, _ error) int {
		if k != key {
			return 0
		}
		if a.c().Unlink(k, parent) != nil {
			return 0
		}
		return 1
	})
	a.printf("%d links removed\n", n)
}

func (a *app) cmdSearch(args []string) {
	if len(args) != 4 && len(args) != 5 {
		a.format()
	}
	ring := a.getKeyID(args[1])
	var dest keyctl.Serial
	if len(args) == 5 {
		dest = a.getKeyID(args[4])
	}
	id, err := a.c().Search(ring, args[2], args[3], dest)
	if err != nil {
		a.fail("keyctl_search", err)
	}
	a.printf("%d\n", id)
}

// readKey is keyctl_read_alloc, failing with keyctl's message.
func (a *app) readKey(args []string) []byte {
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	data, err := a.c().Read(key)
	if err != nil {
		a.fail("keyctl_read_alloc", err)
	}
	return data
}

func (a *app) cmdRead(args []string) {
	data := a.readKey(args)
	if len(data) == 0 {
		a.printf("No data in key\n")
		a.exit(0)
	}
	a.printf("%d bytes of data in key:\n", len(data))
	a.hexDump(data)
	clear(data)
}

func (a *app) cmdPipe(args []string) {
	data := a.readKey(args)
	if len(data) > 0 {
		a.write(data)
		if err := a.out.Flush(); err != nil {
			a.fail("write", err)
		}
	}
	clear(data)
}

func (a *app) cmdPrint(args []string) {
	data := a.readKey(args)
	printable := true
	for _, c := range data {
		if !cIsPrint(c) {
			printable = false
			break
		}
	}
	if printable {
		a.write(data)
		a.printf("\n")
	} else {
		buf := make([]byte, 0, 5+2*len(data)+1)
		buf = append(buf, ":hex:"...)
		for _, c := range data {
			buf = append(buf, hex2(c)...)
		}
		buf = append(buf, '\n')
		a.write(buf)
		clear(buf)
	}
	clear(data)
}

// ringSerials decodes a keyring's payload: 32-bit serials, host order.
func ringSerials(data []byte) []keyctl.Serial {
	out := make([]keyctl.Serial, 0, len(data)/4)
	for i := 0; i+4 <= len(data); i += 4 {
		out = append(out, keyctl.Serial(int32(binary.LittleEndian.Uint32(data[i:]))))
	}
	return out
}

func (a *app) cmdList(args []string) {
	ring := ringSerials(a.readKey(args))
	switch len(ring) {
	case 0:
		a.printf("keyring is empty\n")
		a.exit(0)
	case 1:
		a.printf("1 key in keyring:\n")
	default:
		a.printf("%d keys in keyring:\n", len(ring))
	}
	for _, key := range ring {
		raw, err := a.c().Describe(key)
		if err != nil {
			a.printf("%9d: key inaccessible (%s)\n", key, strerror(err))
			continue
		}
		d, ok := parseDescription(raw)
		if !ok {
			a.eprintf("Unparsable description obtained for key %d\n", key)
			a.exit(3)
		}
		a.printf("%9d: %s %5d %5d %s: %s\n", key, a.prettyMask(d.perm, d.uid, d.gid), d.uid, d.gid, d.typ, d.desc)
	}
}

func (a *app) cmdRlist(args []string) {
	ring := ringSerials(a.readKey(args))
	if len(ring) == 0 {
		a.printf("\n")
		a.exit(0)
	}
	for i, key := range ring {
		sep := ' '
		if i == len(ring)-1 {
			sep = '\n'
		}
		a.printf("%d%c", key, sep)
	}
}

func (a *app) cmdDescribe(args []string) {
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	raw, err := a.c().Describe(key)
	if err != nil {
		a.fail("keyctl_describe_alloc", err)
	}
	d, ok := parseDescription(raw)
	if !ok {
		a.eprintf("Unparsable description obtained for key %d\n", key)
		a.exit(3)
	}
	a.printf("%9d: %s %5d %5d %s: %s\n", key, fullMask(d.perm), d.uid, d.gid, d.typ, d.desc)
}

func (a *app) cmdRdescribe(args []string) {
	if len(args) != 2 && len(args) != 3 {
		a.format()
	}
	if len(args) == 3 && args[2] == "" {
		a.format()
	}
	key := a.getKeyID(args[1])
	raw, err := a.c().Describe(key)
	if err != nil {
		a.fail("keyctl_describe", err)
	}
	out := []byte(raw)
	if len(args) == 3 {
		for i, c := range out {
			if c == ';' {
				out[i] = args[2][0]
			}
		}
	}
	a.write(out)
	a.printf("\n")
}

// idArg parses a uid or gid argument: strtoul base 0 into a 32-bit id,
// where (uid_t)-1 means "leave unchanged".
func (a *app) idArg(s, what string) int64 {
	v, ok := parseUnsigned(s, 0)
	if !ok {
		a.eprintf("Unparsable %s: '%s'\n", what, s)
		a.exit(2)
	}
	if uint32(v) == ^uint32(0) {
		return -1
	}
	return int64(uint32(v))
}

func (a *app) cmdChown(args []string) {
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	uid := a.idArg(args[2], "uid")
	if err := a.c().Chown(key, uid, -1); err != nil {
		a.fail("keyctl_chown", err)
	}
}

func (a *app) cmdChgrp(args []string) {
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	gid := a.idArg(args[2], "gid")
	if err := a.c().Chown(key, -1, gid); err != nil {
		a.fail("keyctl_chown", err)
	}
}

func (a *app) cmdSetperm(args []string) {
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	v, ok := parseUnsigned(args[2], 0)
	if !ok {
		a.eprintf("Unparsable permissions: '%s'\n", args[2])
		a.exit(2)
	}
	if err := a.c().SetPerm(key, keyctl.Perm(uint32(v))); err != nil {
		a.fail("keyctl_setperm", err)
	}
}

// timeoutArg parses a timeout: strtoul base 10, passed on as unsigned.
func (a *app) timeoutArg(s string) uint32 {
	v, ok := parseUnsigned(s, 10)
	if !ok {
		a.eprintf("Unparsable timeout: '%s'\n", s)
		a.exit(2)
	}
	return uint32(v)
}

func (a *app) cmdTimeout(args []string) {
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	t := a.timeoutArg(args[2])
	if err := a.c().SetTimeout(key, t); err != nil {
		a.fail("keyctl_set_timeout", err)
	}
}

func (a *app) cmdSecurity(args []string) {
	if len(args) != 2 {
		a.format()
	}
	key := a.getKeyID(args[1])
	label, err := a.c().GetSecurity(key)
	if err != nil {
		a.fail("keyctl_getsecurity", err)
	}
	a.printf("%s\n", cString([]byte(label)))
}

func (a *app) cmdGetPersistent(args []string) {
	if len(args) != 2 && len(args) != 3 {
		a.format()
	}
	dest := a.getKeyID(args[1])
	uid := int64(-1)
	if len(args) > 2 {
		uid = a.idArg(args[2], "uid")
	}
	id, err := a.c().GetPersistent(uid, dest)
	if err != nil {
		a.fail("keyctl_get_persistent", err)
	}
	a.printf("%d\n", id)
}

func (a *app) cmdRestrictKeyring(args []string) {
	if len(args) < 2 || len(args) > 4 {
		a.format()
	}
	ring := a.getKeyID(args[1])
	var typ, restriction *string
	if len(args) > 2 {
		typ = &args[2]
	}
	if len(args) == 4 {
		restriction = &args[3]
	}
	if err := a.c().RestrictKeyring(ring, typ, restriction); err != nil {
		a.fail("keyctl_restrict_keyring", err)
	}
}

func (a *app) cmdMove(args []string) {
	flags := uint32(keyctl.MoveExcl)
	if len(args) > 4 && args[1] == "-f" {
		flags = 0
		args = append([]string{args[0]}, args[2:]...)
	}
	if len(args) != 4 {
		a.format()
	}
	key := a.getKeyID(args[1])
	from := a.getKeyID(args[2])
	to := a.getKeyID(args[3])
	if err := a.c().Move(key, from, to, flags); err != nil {
		a.fail("keyctl_move", err)
	}
}

// supportsNames are keyctl supports' capability names: byte index, mask.
var supportsNames = []struct {
	name  string
	index int
	mask  byte
}{
	{"capabilities", 0, keyctl.CapCapabilities},
	{"persistent_keyrings", 0, keyctl.CapPersistent},
	{"dh_compute", 0, keyctl.CapDH},
	{"public_key", 0, keyctl.CapPublicKey},
	{"big_key_type", 0, keyctl.CapBigKey},
	{"key_invalidate", 0, keyctl.CapInvalidate},
	{"restrict_keyring", 0, keyctl.CapRestrict},
	{"move_key", 0, keyctl.CapMove},
	{"ns_keyring_name", 1, keyctl.Cap2NSKeyringName},
	{"ns_key_tag", 1, keyctl.Cap2NSKeyTag},
	{"notify", 1, keyctl.Cap2Notifications},
}

func (a *app) cmdSupports(args []string) {
	if len(args) < 1 || len(args) > 2 {
		a.format()
	}
	got, err := a.c().Capabilities()
	if err != nil {
		a.fail("keyctl_capabilities", err)
	}
	var caps [256]byte
	copy(caps[:], got)
	if len(args) == 1 {
		for _, p := range supportsNames {
			v := '0'
			if caps[p.index]&p.mask != 0 {
				v = '1'
			}
			a.printf("have_%s=%c\n", p.name, v)
		}
		a.exit(0)
	}
	if args[1] == "--raw" {
		for _, c := range got {
			a.printf("%02x", c)
		}
		a.printf("\n")
	}
	for _, p := range supportsNames {
		if args[1] == p.name {
			if caps[p.index]&p.mask != 0 {
				a.exit(0)
			}
			a.exit(1)
		}
	}
	a.exit(3)
}
