package main

import (
	"strings"

	"github.com/ukeys/ukeys/keyctl"
)

// cIsSpace is isspace(3) in the C locale.
func cIsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func cIsXDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// cIsPrint is isprint(3) in the C locale for a (signed) char: bytes of
// 0x80 and above are negative there and never printable.
func cIsPrint(c byte) bool { return c >= 0x20 && c <= 0x7e }

func digitVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// strtoul is glibc's strtoul(3) on a 64-bit host: leading white space, an
// optional sign, base 0 meaning "0x" hex, "0" octal or decimal; it returns
// the value (ULONG_MAX on overflow, negated modulo 2^64 for a minus sign),
// what is left of s after the number (all of s if there is no number),
// and whether the value overflowed.
func strtoul(s string, base int) (v uint64, rest string, overflow bool) {
	i := 0
	for i < len(s) && cIsSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	if (base == 0 || base == 16) && i+2 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && cIsXDigit(s[i+2]) {
		i += 2
		base = 16
	} else if base == 0 {
		if i < len(s) && s[i] == '0' {
			base = 8
		} else {
			base = 10
		}
	}
	start := i
	const max = ^uint64(0)
	for i < len(s) {
		d := digitVal(s[i])
		if d >= base {
			break
		}
		if !overflow {
			if v > (max-uint64(d))/uint64(base) {
				overflow = true
			} else {
				v = v*uint64(base) + uint64(d)
			}
		}
		i++
	}
	if i == start {
		return 0, s, false
	}
	if overflow {
		return max, s[i:], true
	}
	if neg {
		v = -v
	}
	return v, s[i:], false
}

// atoi is atoi(3): strtol base 10, junk ignored, truncated to int.
func atoi(s string) int {
	i := 0
	for i < len(s) && cIsSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var v int64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if v < 1<<40 {
			v = v*10 + int64(s[i]-'0')
		}
	}
	if neg {
		v = -v
	}
	return int(int32(v))
}

// getKeyID parses a key id argument as keyctl's get_key_id does.
func (a *app) getKeyID(arg string) keyctl.Serial {
	if strings.HasPrefix(arg, "@") {
		switch arg {
		case "@t":
			return keyctl.ThreadKeyring
		case "@p":
			return keyctl.ProcessKeyring
		case "@s":
			return keyctl.SessionKeyring
		case "@u":
			return keyctl.UserKeyring
		case "@us":
			return keyctl.UserSessionKeyring
		case "@g":
			return keyctl.GroupKeyring
		case "@a":
			return keyctl.ReqKeyAuthKey
		}
		a.eprintf("Unknown special key: '%s'\n", arg)
		a.exit(2)
	}
	if strings.HasPrefix(arg, "%") {
		spec := arg[1:]
		if spec == "" {
			a.badKeyByName()
		}
		var typ, desc string
		if spec[0] == ':' {
			typ, desc = "keyring", spec[1:]
		} else {
			i := strings.IndexByte(spec, ':')
			if i < 0 {
				a.badKeyByName()
			}
			typ, desc = spec[:i], spec[i+1:]
		}
		if desc == "" {
			a.badKeyByName()
		}
		id, ok := a.findKeyByTypeAndDesc(typ, desc)
		if !ok {
			a.eprintf("Can't find '%s:%s'\n", typ, desc)
			a.exit(1)
		}
		return id
	}
	v, rest, _ := strtoul(arg, 0)
	if rest != "" {
		a.eprintf("Unparsable key: '%s'\n", arg)
		a.exit(2)
	}
	return keyctl.Serial(int32(uint32(v)))
}

func (a *app) badKeyByName() {
	a.eprintf("Incorrect key-by-name spec\n")
	a.exit(2)
}

// findKeyByTypeAndDesc is libkeyutils' find_key_by_type_and_desc with no
// destination: request_key without a callout, then a scan of the daemon's
// /proc/keys view, each candidate confirmed by describing it.
func (a *app) findKeyByTypeAndDesc(typ, desc string) (keyctl.Serial, bool) {
	cl := a.c()
	id, err := cl.RequestKey(typ, desc, nil, 0)
	if err == nil {
		return id, true
	}
	if errnoOf(err) == keyctl.ENOMEM {
		return 0, false
	}
	text, err := cl.ProcKeys()
	if err != nil {
		a.eprintf("libkeyutils: Can't open /proc/keys: %s\n", strerror(err))
		return 0, false
	}
	for _, line := range procLines(text) {
		serial, typeCol, kdesc, ok := parseProcKeysLine(line)
		if !ok || typeCol != typ {
			continue
		}
		if !strings.HasPrefix(kdesc, desc) {
			continue
		}
		if len(kdesc) > len(desc) && kdesc[len(desc)] != ':' && kdesc[len(desc)] != ' ' {
			continue
		}
		// The description is confirmed through KEYCTL_DESCRIBE into a
		// 1023-byte buffer: longer answers do not fit and are skipped.
		d, err := cl.Describe(keyctl.Serial(int32(serial)))
		if err != nil || len(d)+1 >= 1023 {
			continue
		}
		i := strings.LastIndexByte(d, ';')
		if i < 0 || d[i+1:] != desc {
			continue
		}
		return keyctl.Serial(int32(serial)), true
	}
	return 0, false
}

// procLines splits /proc/keys text as fgets with a 1024-byte buffer does:
// a longer line comes back in pieces.
func procLines(text string) []string {
	var out []string
	for text != "" {
		n := strings.IndexByte(text, '\n')
		if n < 0 {
			n = len(text)
		} else {
			n++
		}
		if n > 1023 {
			n = 1023
		}
		line := text[:n]
		text = text[n:]
		out = append(out, strings.TrimSuffix(line, "\n"))
	}
	return out
}

// parseProcKeysLine is sscanf(line, "%x %*s %*u %*s %*x %*d %*d %s %n"):
// the serial, the (9-column, truncated) type and the text after it.
func parseProcKeysLine(line string) (serial uint32, typ, desc string, ok bool) {
	p := line
	token := func() (string, bool) {
		for p != "" && cIsSpace(p[0]) {
			p = p[1:]
		}
		i := 0
		for i < len(p) && !cIsSpace(p[i]) {
			i++
		}
		if i == 0 {
			return "", false
		}
		t := p[:i]
		p = p[i:]
		return t, true
	}
	numeric := func(t string, base int) bool {
		if t[0] == '-' || t[0] == '+' {
			t = t[1:]
		}
		if base == 16 && len(t) > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') {
			t = t[2:]
		}
		return t != "" && digitVal(t[0]) < base
	}
	t, good := token()
	if !good || !numeric(t, 16) {
		return 0, "", "", false
	}
	v, _, _ := strtoul(t, 16)
	serial = uint32(v)
	for _, f := range []struct {
		base int
		num  bool
	}{{0, false}, {10, true}, {0, false}, {16, true}, {10, true}, {10, true}} {
		t, good := token()
		if !good || f.num && !numeric(t, f.base) {
			return 0, "", "", false
		}
	}
	typ, good = token()
	if !good {
		return 0, "", "", false
	}
	for p != "" && cIsSpace(p[0]) {
		p = p[1:]
	}
	return serial, typ, p, true
}
