package wire

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ukeys/ukeys/keyctl"
)

// The table describes the system calls as the kernel defines them, so
// that an interceptor can decode their arguments from it.
func TestSpecTableMatchesTheSystemCalls(t *testing.T) {
	names := map[string]bool{}
	for s := range Specs() {
		if s.Name == "" || names[s.Name] {
			t.Errorf("%d: name %q empty or taken", s.Op, s.Name)
		}
		names[s.Name] = true
		if SpecOf(s.Op) != s || s.Op.String() != s.Name || !s.Op.Known() {
			t.Errorf("%s: not found by its number", s.Name)
		}
		// keyctl's command is argument 1; add_key and request_key take
		// their arguments from 1.
		lo, hi := 0, 0
		switch s.Sys {
		case SysKeyctl:
			lo, hi = 2, 5
			if s.Op >= 1000 {
				t.Errorf("%s: keyctl commands are below 1000", s.Name)
			}
		case SysAddKey:
			lo, hi = 1, 5
		case SysRequestKey:
			lo, hi = 1, 4
		case NoSyscall:
			if s.Op < 1000 {
				t.Errorf("%s: the daemon's own operations are numbered from 1000", s.Name)
			}
		}
		used := map[int]string{}
		claim := func(reg int, what string) {
			if reg < lo || reg > hi {
				t.Errorf("%s: %s in argument %d, outside %d..%d", s.Name, what, reg, lo, hi)
			}
			if used[reg] != "" {
				t.Errorf("%s: argument %d is both %s and %s", s.Name, reg, used[reg], what)
			}
			used[reg] = what
		}
		for _, a := range s.Args {
			if a.Reg == 0 {
				if s.Sys != NoSyscall && !s.Indirect {
					t.Errorf("%s: %s comes from no argument of the call", s.Name, a.Name)
				}
				continue
			}
			if s.Sys == NoSyscall {
				t.Errorf("%s: %s has an argument number but no system call", s.Name, a.Name)
			}
			claim(a.Reg, a.Name)
			if a.Kind == KindBytes {
				claim(a.Reg+1, a.Name+" length")
			}
		}
		if r := s.Result; r.BufReg != 0 {
			claim(r.BufReg, "result buffer")
			// The size may be an argument too (dh_compute's buflen: 0
			// asks for the length alone).
			if used[r.BufReg+1] == "" && !r.Sized {
				claim(r.BufReg+1, "result buffer size")
			}
		} else if r.Buf && s.Sys != NoSyscall {
			t.Errorf("%s: answers a buffer but says not where the call puts it", s.Name)
		}
		if got := SyscallSpec(s.Sys, uint64(s.Op)); s.Sys != NoSyscall && got != s {
			t.Errorf("%s: SyscallSpec finds %v", s.Name, got)
		}
	}
	// A few fixed points of keyctl.h, and commands ukeys does not serve.
	for cmd, want := range map[uint64]string{3: "revoke", 11: "read", 23: "dh_compute", 24: "pkey_query", 28: "pkey_verify", 30: "move", 32: "watch_key"} {
		if s := SyscallSpec(SysKeyctl, cmd); s == nil || s.Name != want {
			t.Errorf("keyctl command %d: %v, want %s", cmd, s, want)
		}
	}
	for _, cmd := range []uint64{20, 1000, 1100, 1 << 40} {
		if s := SyscallSpec(SysKeyctl, cmd); s != nil {
			t.Errorf("keyctl command %d is %s", cmd, s.Name)
		}
	}
	if s := SyscallSpec(SysAddKey, 0); s == nil || s.Op != OpAddKey {
		t.Errorf("add_key: %v", s)
	}
}

// argValue is an argument generated for a round trip, and what reading
// it back must give.
type argValue struct {
	v    Value
	i    int64
	b    []byte // nil: absent
	kind Kind
}

func genArg(t *rapid.T, s *Spec, i int) argValue {
	a := s.Args[i]
	label := fmt.Sprintf("%s.%s", s.Name, a.Name)
	switch a.Kind {
	case KindInt:
		n := rapid.Int64().Draw(t, label)
		return argValue{v: Int(n), i: n, kind: a.Kind}
	case KindOptStr:
		if rapid.Bool().Draw(t, label+" absent") {
			return argValue{v: OptStr(nil), kind: a.Kind}
		}
		fallthrough
	case KindStr:
		max := a.Max
		if max == 0 {
			max = 200
		}
		str := rapid.StringOfN(rapid.Rune().Filter(func(r rune) bool { return r != 0 }), 0, max, max).Draw(t, label)
		b := []byte(str)
		return argValue{v: Str(str), b: b, kind: a.Kind}
	case KindBytes:
		if rapid.Bool().Draw(t, label+" absent") {
			return argValue{v: Bytes(nil), kind: a.Kind}
		}
		b := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, label)
		return argValue{v: Bytes(b), b: slices.Clone(b), kind: a.Kind}
	}
	t.Fatalf("%s: kind %v", label, a.Kind)
	return argValue{}
}

// Any arguments that fit an operation's entry travel through Set, the
// encoder, the decoder and Check, and read back as they were sent.
func TestSpecRoundTrip(t *testing.T) {
	var all []*Spec
	for s := range Specs() {
		all = append(all, s)
	}
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SampledFrom(all).Draw(t, "op")
		args := make([]argValue, len(s.Args))
		vals := make([]Value, len(s.Args))
		for i := range s.Args {
			args[i] = genArg(t, s, i)
			vals[i] = args[i].v
		}
		var in Request
		if err := in.Set(s.Op, vals...); err != nil {
			t.Fatal(err)
		}
		in.Tag = rapid.Uint32().Draw(t, "tag")
		body, err := AppendRequest(nil, &in)
		if err != nil {
			t.Fatal(err)
		}
		var out Request
		if err := out.Decode(body); err != nil {
			t.Fatal(err)
		}
		a, err := s.Check(&out)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if a.Op() != s.Op || out.Tag != in.Tag {
			t.Fatalf("op %v tag %d", a.Op(), out.Tag)
		}
		for i, want := range args {
			if want.kind == KindInt {
				if got := a.Int(i); got != want.i {
					t.Fatalf("%s.%s: %d, want %d", s.Name, s.Args[i].Name, got, want.i)
				}
				continue
			}
			got := a.Bytes(i)
			if (got == nil) != (want.b == nil) || !bytes.Equal(got, want.b) {
				t.Fatalf("%s.%s: %q, want %q", s.Name, s.Args[i].Name, got, want.b)
			}
			if want.kind == KindOptStr && (a.OptStr(i) == nil) != (want.b == nil) {
				t.Fatalf("%s.%s: absent %v", s.Name, s.Args[i].Name, a.OptStr(i) == nil)
			}
		}
	})
}

func TestCheck(t *testing.T) {
	add := func(ints []int64, bufs ...[]byte) *Request {
		return &Request{Op: OpAddKey, Ints: ints, Bufs: bufs}
	}
	long := func(n int) []byte { return bytes.Repeat([]byte{'a'}, n) }
	cases := []struct {
		name string
		r    *Request
		err  error
		typ  string
		desc string
	}{
		{"whole", add([]int64{-3}, []byte("user"), []byte("d"), []byte("p")), nil, "user", "d"},
		{"strings end at NUL", add([]int64{-3}, []byte("user\x00junk"), []byte("d\x00\x00"), []byte("p\x00p")), nil, "user", "d"},
		{"type at its bound", add([]int64{-3}, long(keyctl.MaxTypeName), []byte("d"), nil), nil, string(long(keyctl.MaxTypeName)), "d"},
		{"type past its bound", add([]int64{-3}, long(keyctl.MaxTypeName+1), []byte("d"), nil), keyctl.EINVAL, "", ""},
		{"cut back within its bound", add([]int64{-3}, append(long(3), make([]byte, 100)...), []byte("d"), nil), nil, "aaa", "d"},
		{"description past its bound", add([]int64{-3}, []byte("user"), long(keyctl.MaxDescription+1), nil), keyctl.EINVAL, "", ""},
		{"no ring", add(nil, []byte("user"), []byte("d"), nil), keyctl.EINVAL, "", ""},
		{"no type", add([]int64{-3}, nil, []byte("d"), nil), keyctl.EINVAL, "", ""},
		{"no buffers", add([]int64{-3}), keyctl.EINVAL, "", ""},
		{"payload missing: absent", add([]int64{-3}, []byte("user"), []byte("d")), nil, "user", "d"},
		{"extra arguments ignored", add([]int64{-3, 7, 8}, []byte("user"), []byte("d"), nil, []byte("x")), nil, "user", "d"},
		{"another operation", &Request{Op: OpRead, Ints: []int64{1}}, keyctl.EINVAL, "", ""},
	}
	spec := SpecOf(OpAddKey)
	for _, c := range cases {
		a, err := spec.Check(c.r)
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
			continue
		}
		if err == nil && (a.Str(0) != c.typ || a.Str(1) != c.desc || a.Serial(3) != -3) {
			t.Errorf("%s: %q %q %d", c.name, a.Str(0), a.Str(1), a.Serial(3))
		}
	}
	// Reading an argument as what it is not is a bug, and says so.
	a, _ := spec.Check(add([]int64{-3}, []byte("user"), []byte("d"), nil))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("reading a string as an integer did not panic")
			}
		}()
		a.Int(0)
	}()
}

func TestSetRefusesWhatDoesNotFit(t *testing.T) {
	var r Request
	for _, c := range []struct {
		op   Op
		args []Value
	}{
		{Op(999), nil},
		{OpRead, nil},
		{OpRead, []Value{Int(1), Int(2)}},
		{OpRead, []Value{Str("1")}},
		{OpAddKey, []Value{Int(1), Str("d"), Bytes(nil), Int(-3)}},
		{OpAddKey, []Value{OptStr(nil), Str("d"), Bytes(nil), Int(-3)}},
		{OpAddKey, []Value{Str("user"), Str("d"), Bytes(nil), Str("-3")}},
	} {
		if err := r.Set(c.op, c.args...); err == nil {
			t.Errorf("Set(%v, %v) = nil", c.op, c.args)
		}
	}
	if err := r.Set(OpAddKey, Str("user"), Str("d"), Bytes(nil), Int(-3)); err != nil || r.Bufs[2] != nil || len(r.Ints) != 1 {
		t.Fatalf("%v %+v", err, r)
	}
}

// Whatever decodes and passes Check reads back without a panic, every
// argument as its kind, and set again from what was read it encodes to a
// request that checks to the same arguments.
func FuzzCheck(f *testing.F) {
	for s := range Specs() {
		var r Request
		vals := make([]Value, len(s.Args))
		for i, a := range s.Args {
			switch a.Kind {
			case KindInt:
				vals[i] = Int(-3)
			case KindStr, KindOptStr:
				vals[i] = Str("user")
			case KindBytes:
				vals[i] = Bytes([]byte("payload\x00"))
			}
		}
		if err := r.Set(s.Op, vals...); err != nil {
			f.Fatal(err)
		}
		body, _ := AppendRequest(nil, &r)
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Request
		if r.Decode(body) != nil {
			return
		}
		s := SpecOf(r.Op)
		if s == nil {
			return
		}
		a, err := s.Check(&r)
		if err != nil {
			return
		}
		vals := make([]Value, len(s.Args))
		for i, arg := range s.Args {
			switch arg.Kind {
			case KindInt:
				vals[i] = Int(a.Int(i))
			case KindStr:
				if bytes.IndexByte(a.Bytes(i), 0) >= 0 || arg.Max > 0 && len(a.Bytes(i)) > arg.Max {
					t.Fatalf("%s.%s: %q passed Check", s.Name, arg.Name, a.Bytes(i))
				}
				vals[i] = Str(a.Str(i))
			case KindOptStr:
				vals[i] = OptStr(a.OptStr(i))
			case KindBytes:
				vals[i] = Bytes(a.Bytes(i))
			}
		}
		var again Request
		if err := again.Set(s.Op, vals...); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		b2, err := AppendRequest(nil, &again)
		if err != nil {
			t.Fatal(err)
		}
		var r2 Request
		if err := r2.Decode(b2); err != nil {
			t.Fatal(err)
		}
		a2, err := s.Check(&r2)
		if err != nil {
			t.Fatalf("%s: re-encoded arguments fail: %v", s.Name, err)
		}
		for i, arg := range s.Args {
			if arg.Kind == KindInt && a.Int(i) != a2.Int(i) ||
				arg.Kind != KindInt && (!bytes.Equal(a.Bytes(i), a2.Bytes(i)) || (a.Bytes(i) == nil) != (a2.Bytes(i) == nil)) {
				t.Fatalf("%s.%s changed in a round trip", s.Name, arg.Name)
			}
		}
	})
}
