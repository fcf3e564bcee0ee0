package main

import (
	"strings"
	"testing"
)

func TestStrtoul(t *testing.T) {
	for _, c := range []struct {
		in   string
		base int
		v    uint64
		rest string
	}{
		{"123", 0, 123, ""},
		{"0x1f", 0, 31, ""},
		{"0X1F", 0, 31, ""},
		{"017", 0, 15, ""},
		{"08", 0, 0, "8"},
		{"0x", 0, 0, "x"},
		{"0xg", 0, 0, "xg"},
		{"-1", 0, ^uint64(0), ""},
		{"-3", 0, ^uint64(2), ""},
		{"  +7z", 0, 7, "z"},
		{"", 0, 0, ""},
		{"abc", 0, 0, "abc"},
		{"-", 0, 0, "-"},
		{"99999999999999999999999", 10, ^uint64(0), ""},
		{"0x10", 10, 0, "x10"},
		{"ff", 16, 255, ""},
		{"0xff", 16, 255, ""},
	} {
		v, rest, _ := strtoul(c.in, c.base)
		if v != c.v || rest != c.rest {
			t.Errorf("strtoul(%q, %d) = %d, %q; want %d, %q", c.in, c.base, v, rest, c.v, c.rest)
		}
	}
}

func TestGetopt(t *testing.T) {
	a := &app{stderr: &strings.Builder{}}
	for _, c := range []struct {
		args     []string
		optstr   string
		opts     string
		operands string
		ok       bool
	}{
		{[]string{"watch", "-fab", "@s"}, "f:", "f=ab", "@s", true},
		{[]string{"watch", "@s", "-f", "ab"}, "f:", "f=ab", "@s", true},
		{[]string{"watch", "--", "-f"}, "f:", "", "-f", true},
		{[]string{"watch", "-"}, "f:", "", "-", true},
		{[]string{"watch", "-q"}, "f:", "", "", false},
		{[]string{"watch", "-f"}, "f:", "", "", false},
		{[]string{"ws", "-dn", "x", "log", "-f", "i"}, "+df:n:", "d= n=x", "log -f i", true},
		{[]string{"rk", "-vv", "create", "-d"}, "D:dlnv", "v= v= d=", "create", true},
	} {
		opts, operands, ok := a.getopt(c.args, c.optstr)
		var os []string
		for _, o := range opts {
			os = append(os, string(o.c)+"="+o.arg)
		}
		if ok != c.ok || ok && (strings.Join(os, " ") != c.opts || strings.Join(operands, " ") != c.operands) {
			t.Errorf("getopt(%q, %q) = %q, %q, %v", c.args, c.optstr, os, operands, ok)
		}
	}
}

func TestParseDescription(t *testing.T) {
	for _, c := range []struct {
		in string
		d  description
		ok bool
	}{
		{"user;0;0;3f010000;foo", description{"user", 0, 0, 0x3f010000, "foo"}, true},
		{"keyring;1000;-1;1f3f0000;_uid.1000", description{"keyring", 1000, -1, 0x1f3f0000, "_uid.1000"}, true},
		{"user;4294967294;65534;3f010000;a;b", description{"user", -2, 65534, 0x3f010000, "a;b"}, true},
		{"user;0;0;3f010000;", description{"user", 0, 0, 0x3f010000, ""}, true},
		{";0;0;0;x", description{}, false},
		{"user;0;0;3f010000", description{}, false},
		{"user;x;0;0;d", description{}, false},
	} {
		d, ok := parseDescription(c.in)
		if ok != c.ok || ok && d != c.d {
			t.Errorf("parseDescription(%q) = %+v, %v", c.in, d, ok)
		}
	}
}

func TestProcKeysLine(t *testing.T) {
	s, typ, desc, ok := parseProcKeysLine("1a2b3c4d I--Q---     1 perm 3f010000  1000  1000 user      foo: 3")
	if !ok || s != 0x1a2b3c4d || typ != "user" || desc != "foo: 3" {
		t.Errorf("got %x %q %q %v", s, typ, desc, ok)
	}
	if _, _, _, ok := parseProcKeysLine("garbage"); ok {
		t.Error("garbage parsed")
	}
	long := strings.Repeat("x", 2000) + "\nnext\n"
	if lines := procLines(long); len(lines) != 3 || lines[2] != "next" {
		t.Errorf("procLines split %d lines", len(lines))
	}
}

func TestMasks(t *testing.T) {
	if got := fullMask(0x3f010000); got != "alswrv-----v------------" {
		t.Errorf("fullMask = %q", got)
	}
	a := &app{credsLoaded: true, euid: 1000, egid: 1000, groups: []uint32{10}}
	for _, c := range []struct {
		perm     uint32
		uid, gid int32
		want     string
	}{
		{0x3f010000, 1000, 1000, "--alswrv"},
		{0x01020304, 1000, 5, "------rv"},
		{0x01020304, 7, 10, "------rv"},
		{0x01020304, 7, 1000, "------rv"},
		{0x01020304, 7, -1, "-----w-v"},
		{0x01020004, 7, 10, "-------v"},
	} {
		if got := a.prettyMask(c.perm, c.uid, c.gid); got != c.want {
			t.Errorf("prettyMask(%08x, %d, %d) = %q, want %q", c.perm, c.uid, c.gid, got, c.want)
		}
	}
}

func TestMasker(t *testing.T) {
	m := newMasker()
	m.learn("0000007b I--Q--- 1 perm 3f010000 0 0 user a: 1\n000001c8 x\n")
	got := m.mask("Session Keyring\n       123 --alswrv\n 0x000001c8 x\n123: 456\nlink 123 123\n-123 1c8 _uid.123 x123\n")
	want := "Session Keyring\nK1 --alswrv\nK2 x\nK1: K2\nlink K1 K1\n-123 K2 _uid.K1 x123\n"
	if got != want {
		t.Errorf("mask:\n%s\nwant:\n%s", got, want)
	}
}
