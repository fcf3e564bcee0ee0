package main

import (
	"strconv"
	"strings"
)

// masker replaces key serial numbers in output with labels K1, K2… in
// the order they first appear, so that outputs of runs with different
// (random) serials compare equal. Only numbers known to be serials are
// replaced: those listed in /proc/keys views the masker was shown. The
// padding before a replaced number is squeezed to one space (none at the
// start of a line), since field widths depend on the number of digits.
type masker struct {
	known  map[uint32]bool
	labels map[uint32]string
}

func newMasker() *masker {
	return &masker{known: make(map[uint32]bool), labels: make(map[uint32]string)}
}

// learn records the serials of a /proc/keys text.
func (m *masker) learn(procKeys string) {
	for _, line := range strings.Split(procKeys, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseUint(f[0], 16, 32); err == nil {
			m.known[uint32(v)] = true
		}
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !cIsXDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// serialOf decides whether a word is a known serial: decimal, 0x-hex or
// bare hex (as in /proc/keys and authorisation key descriptions).
func (m *masker) serialOf(w string) (uint32, bool) {
	try := func(s string, base int) (uint32, bool) {
		v, err := strconv.ParseUint(s, base, 32)
		if err != nil || !m.known[uint32(v)] {
			return 0, false
		}
		return uint32(v), true
	}
	if strings.HasPrefix(w, "0x") && allHex(w[2:]) {
		return try(w[2:], 16)
	}
	if allDigits(w) {
		if v, ok := try(w, 10); ok {
			return v, true
		}
	}
	if len(w) <= 8 && allHex(w) {
		return try(w, 16)
	}
	return 0, false
}

func (m *masker) mask(text string) string {
	var b strings.Builder
	for i := 0; i < len(text); {
		c := text[i]
		if !isAlnum(c) || (i > 0 && (isAlnum(text[i-1]) || text[i-1] == '-')) {
			b.WriteByte(c)
			i++
			continue
		}
		j := i
		for j < len(text) && isAlnum(text[j]) {
			j++
		}
		w := text[i:j]
		v, ok := m.serialOf(w)
		if !ok {
			b.WriteString(w)
			i = j
			continue
		}
		label, seen := m.labels[v]
		if !seen {
			label = "K" + strconv.Itoa(len(m.labels)+1)
			m.labels[v] = label
		}
		s := b.String()
		trimmed := strings.TrimRight(s, " ")
		if len(trimmed) != len(s) {
			b.Reset()
			b.WriteString(trimmed)
			if trimmed != "" && !strings.HasSuffix(trimmed, "\n") {
				b.WriteByte(' ')
			}
		}
		b.WriteString(label)
		i = j
	}
	return b.String()
}
