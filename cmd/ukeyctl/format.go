package main

import (
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

// description is a parsed KEYCTL_DESCRIBE answer.
type description struct {
	typ      string
	uid, gid int32
	perm     uint32
	desc     string
}

// parseDescription parses "type;uid;gid;perm;desc" as keyctl's
// sscanf(buf, "%[^;];%d;%d;%x;%n", ...) does, reporting whether all four
// fields and the description position were found.
func parseDescription(s string) (d description, ok bool) {
	i := strings.IndexByte(s, ';')
	if i <= 0 {
		return d, false
	}
	d.typ = s[:i]
	rest := s[i+1:]
	num := func(base int) (uint64, bool) {
		// %d and %x skip leading white space and take a sign.
		v, r, _ := strtoul(rest, base)
		if r == rest {
			return 0, false
		}
		rest = r
		return v, true
	}
	semi := func() bool {
		if rest == "" || rest[0] != ';' {
			return false
		}
		rest = rest[1:]
		return true
	}
	uid, ok1 := num(10)
	if !ok1 || !semi() {
		return d, false
	}
	gid, ok2 := num(10)
	if !ok2 || !semi() {
		return d, false
	}
	perm, ok3 := num(16)
	if !ok3 || !semi() {
		return d, false
	}
	d.uid, d.gid, d.perm = int32(uint32(uid)), int32(uint32(gid)), uint32(perm)
	d.desc = rest
	return d, true
}

// prettyMask is calc_perms: "--" then alswrv of the rights the caller has
// by keyctl's reckoning (possessor bits always, plus the user, group or
// other bits chosen by the effective uid and gids).
func (a *app) prettyMask(perm uint32, uid, gid int32) string {
	a.loadCreds()
	perms := (perm & uint32(keyctl.PossAll)) >> 24
	switch {
	case uint32(uid) == a.euid:
		perms |= (perm & uint32(keyctl.UserAll)) >> 16
	case gid != -1 && a.inGroup(uint32(gid)):
		perms |= (perm & uint32(keyctl.GroupAll)) >> 8
	default:
		perms |= perm & uint32(keyctl.OtherAll)
	}
	return "--" + rights(perms)
}

func (a *app) inGroup(gid uint32) bool {
	if gid == a.egid {
		return true
	}
	for _, g := range a.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// rights renders one class byte as "alswrv" with '-' for missing rights.
func rights(b uint32) string {
	const letters = "alswrv"
	var out [6]byte
	for i := range 6 {
		if b&(0x20>>i) != 0 {
			out[i] = letters[i]
		} else {
			out[i] = '-'
		}
	}
	return string(out[:])
}

// fullMask is describe's 24-character mask: possessor, user, group, other.
func fullMask(perm uint32) string {
	return rights(perm>>24&0x3f) + rights(perm>>16&0x3f) + rights(perm>>8&0x3f) + rights(perm&0x3f)
}

// hexDump writes data as keyctl read does: "%02hhx" per byte, a space
// after every fourth, a newline after every 32nd, and a final newline.
// data must not be empty.
func (a *app) hexDump(data []byte) {
	var b strings.Builder
	sep := byte(0)
	for i, c := range data {
		if sep != 0 {
			b.WriteByte(sep)
			sep = 0
		}
		b.WriteString(hex2(c))
		col := i + 1
		if col%32 == 0 {
			sep = '\n'
		} else if col%4 == 0 {
			sep = ' '
		}
	}
	b.WriteByte('\n')
	a.printf("%s", b.String())
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// hex2bin converts "-x" data: hex pairs, white space ignored.
func (a *app) hex2bin(data []byte, asHex bool) []byte {
	if !asHex || len(data) == 0 {
		return data
	}
	out := make([]byte, 0, len(data)/2+1)
	for p := 0; p < len(data); {
		if cIsSpace(data[p]) {
			p++
			continue
		}
		if len(data)-p < 2 {
			a.eprintf("Short hex doublet\n")
			a.exit(1)
		}
		if !cIsXDigit(data[p]) || !cIsXDigit(data[p+1]) {
			a.eprintf("Bad hex doublet\n")
			a.exit(1)
		}
		out = append(out, byte(digitVal(data[p])<<4|digitVal(data[p+1])))
		p += 2
	}
	return out
}

// grabStdin reads at most 1 MiB of data from stdin, as keyctl does.
func (a *app) grabStdin() []byte {
	const size = 1024*1024 + 1
	buf := make([]byte, size)
	n := 0
	for n < size {
		m, err := a.stdin.Read(buf[n:])
		n += m
		if err != nil {
			if isEOF(err) {
				break
			}
			a.fail("stdin", err)
		}
		if m == 0 && err == nil {
			continue
		}
	}
	if n >= size {
		a.eprintf("Too much data read on stdin\n")
		a.exit(1)
	}
	return buf[:n]
}

// cString cuts b at its first NUL, as passing it as a C string does.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// parseUnsigned is strtoul with keyctl's "must consume everything" check.
func parseUnsigned(s string, base int) (uint64, bool) {
	v, rest, _ := strtoul(s, base)
	return v, rest == ""
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
