package wire

import (
	"bytes"
	"fmt"
	"iter"

	"github.com/ukeys/ukeys/keyctl"
)

// Kind is what an argument of an operation is.
type Kind uint8

const (
	// KindInt is an integer: a serial, a uid, a mask, seconds, flags.
	KindInt Kind = iota + 1
	// KindStr is a string. Like a C string the kernel copies from user
	// space, it ends at its first NUL byte: "name\x00rest" is "name".
	KindStr
	// KindOptStr is a string or absent (a NULL pointer, which the kernel
	// tells apart from an empty string).
	KindOptStr
	// KindBytes is a buffer taken as it is, a payload; absent (a NULL
	// pointer, allowed with a length of 0) reads as nil.
	KindBytes
)

func (k Kind) String() string {
	switch k {
	case KindInt:
		return "int"
	case KindStr:
		return "string"
	case KindOptStr:
		return "optional string"
	case KindBytes:
		return "bytes"
	}
	return "invalid kind"
}

// Arg is one argument of an operation.
type Arg struct {
	Name string
	Kind Kind
	// Max bounds a string's length in bytes: a longer one fails with
	// EINVAL, as the kernel's copy from user space does, before anything
	// is made of it. 0: the frame bounds it.
	Max int
	// Reg is the position of the argument in the system call that
	// carries it (1 for add_key's first; keyctl's command is its 1), or 0
	// if it is not one of the call's arguments. A KindBytes argument's
	// length is the argument after it.
	Reg int
}

// Syscall is the system call that carries an operation.
type Syscall uint8

const (
	NoSyscall     Syscall = iota // the daemon's own operation
	SysAddKey                    // add_key(2)
	SysRequestKey                // request_key(2)
	SysKeyctl                    // keyctl(2), its command being the operation's number
)

// Result is what an operation answers when it succeeds.
type Result struct {
	// Ints is the number of integers. For a system call, the first is
	// its return value.
	Ints int
	// Buf: a buffer follows the integers. keyctl copies it into the
	// caller's buffer, whose address is argument BufReg and whose size
	// is the argument after, if it fits whole, and returns its full
	// length.
	Buf    bool
	BufReg int
	// Text: the kernel copies the buffer out as a C string, its NUL
	// counted in the length it returns.
	Text bool
	// Partial: the kernel copies as much as fits of a buffer too large
	// for the caller's (KEYCTL_CAPABILITIES), not nothing.
	Partial bool
	// Sized: no argument gives the buffer's size. The answer always fits
	// (the operation bounds it by a length passed in a structure, as
	// the pkey operations' out_len, or it has a fixed size, as the
	// pkey_query structure), and the call returns the first integer
	// (the output's length, 0 for pkey_query).
	Sized bool
}

// Spec is an operation's entry in the table: what it takes and answers,
// and which system call carries it. Encoding ([Request.Set]), decoding
// ([Spec.Check], [Args]) and the fuzz targets all read it, so that an
// operation is added by adding its entry.
type Spec struct {
	Op   Op
	Name string
	Sys  Syscall
	// Indirect: the system call passes arguments in structures, which an
	// interceptor reads itself (their fields have Reg 0).
	Indirect bool
	Args     []Arg
	Result   Result

	slots        []uint8 // each argument's index among Ints or Bufs
	nInts, nBufs int
	required     int // arguments up to the last Int or Str: the rest may be missing
}

// opLimit bounds the operation numbers, so that opSpecs can be an array
// indexed by them: a lookup per request and per answer, without hashing.
const opLimit = 1300

// opSpecs indexes specs by operation number.
var opSpecs = func() *[opLimit]*Spec {
	m := new([opLimit]*Spec)
	for i := range specs {
		s := &specs[i]
		if s.Op >= opLimit {
			panic(fmt.Sprintf("wire: operation %d is past opLimit", s.Op))
		}
		if m[s.Op] != nil {
			panic(fmt.Sprintf("wire: operation %d listed twice", s.Op))
		}
		m[s.Op] = s
		for j, a := range s.Args {
			switch a.Kind {
			case KindInt:
				s.slots = append(s.slots, uint8(s.nInts))
				s.nInts++
				s.required = j + 1
			case KindStr:
				s.required = j + 1
				fallthrough
			case KindOptStr, KindBytes:
				s.slots = append(s.slots, uint8(s.nBufs))
				s.nBufs++
			default:
				panic(fmt.Sprintf("wire: %s argument %s has no kind", s.Name, a.Name))
			}
		}
		if s.nInts > MaxInts || s.nBufs > MaxBufs {
			panic(fmt.Sprintf("wire: %s has too many arguments", s.Name))
		}
	}
	return m
}()

// SpecOf returns op's entry in the table, or nil for an operation this
// version does not define.
func SpecOf(op Op) *Spec {
	if op >= opLimit {
		return nil
	}
	return opSpecs[op]
}

// Specs yields every operation's entry, in the table's order.
func Specs() iter.Seq[*Spec] {
	return func(yield func(*Spec) bool) {
		for i := range specs {
			if !yield(&specs[i]) {
				return
			}
		}
	}
}

// SyscallSpec returns the entry of the operation that system call sys
// carries; cmd is keyctl's command, ignored for the other calls. It is
// nil for a keyctl command that ukeys does not serve.
func SyscallSpec(sys Syscall, cmd uint64) *Spec {
	var s *Spec
	switch sys {
	case SysAddKey:
		s = SpecOf(OpAddKey)
	case SysRequestKey:
		s = SpecOf(OpRequestKey)
	case SysKeyctl:
		if cmd < 1000 {
			s = SpecOf(Op(cmd))
		}
	}
	if s == nil || s.Sys != sys {
		return nil
	}
	return s
}

// String names the operation (for logs and metrics labels).
func (o Op) String() string {
	if s := SpecOf(o); s != nil {
		return s.Name
	}
	return "unknown"
}

// Known reports whether o is an operation this version defines.
func (o Op) Known() bool { return SpecOf(o) != nil }

// Check checks a request's arguments against the operation's entry and
// returns them for reading by position. Every integer and string the
// entry lists must be there (an optional string or buffer missing at the
// end reads as absent); arguments beyond the entry's are ignored, as
// keyctl ignores the arguments a command does not use. Strings are cut at
// their first NUL byte, in place, and held to their bounds. A request
// that does not fit fails with EINVAL.
func (s *Spec) Check(r *Request) (Args, error) {
	if r.Op != s.Op {
		return Args{}, keyctl.EINVAL
	}
	for i, a := range s.Args {
		slot := int(s.slots[i])
		switch a.Kind {
		case KindInt:
			if slot >= len(r.Ints) {
				return Args{}, keyctl.EINVAL
			}
		case KindStr, KindOptStr:
			if slot >= len(r.Bufs) || r.Bufs[slot] == nil {
				if a.Kind == KindStr {
					return Args{}, keyctl.EINVAL
				}
				continue
			}
			b := r.Bufs[slot]
			if n := bytes.IndexByte(b, 0); n >= 0 {
				b = b[:n:n]
				r.Bufs[slot] = b
			}
			if a.Max > 0 && len(b) > a.Max {
				return Args{}, keyctl.EINVAL
			}
		}
	}
	return Args{s: s, r: r}, nil
}

// CheckResponse reports whether a successful answer carries what the
// entry says it does ([ErrMalformed] if not). A failed one carries nothing.
func (s *Spec) CheckResponse(r *Response) error {
	if r.Errno != 0 {
		return nil
	}
	if len(r.Ints) < s.Result.Ints || (s.Result.Buf && len(r.Bufs) < 1) {
		return fmt.Errorf("%w: %s answered %d integers and %d buffers", ErrMalformed, s.Name, len(r.Ints), len(r.Bufs))
	}
	return nil
}

// Args are a request's arguments, checked by [Spec.Check], read by their
// position in the entry's Args. Reading an argument as a kind it is not
// is a bug in the caller, and panics.
type Args struct {
	s *Spec
	r *Request
}

func (a Args) slot(i int, kinds ...Kind) int {
	k := a.s.Args[i].Kind
	for _, want := range kinds {
		if k == want {
			return int(a.s.slots[i])
		}
	}
	panic(fmt.Sprintf("wire: %s argument %d (%s) is a %v", a.s.Name, i, a.s.Args[i].Name, k))
}

// Op returns the request's operation.
func (a Args) Op() Op { return a.s.Op }

// Int returns integer argument i.
func (a Args) Int(i int) int64 { return a.r.Ints[a.slot(i, KindInt)] }

// Serial returns integer argument i as a key serial.
func (a Args) Serial(i int) keyctl.Serial { return keyctl.Serial(a.Int(i)) }

// Bytes returns string or buffer argument i, nil if absent. It aliases
// the request.
func (a Args) Bytes(i int) []byte {
	if j := a.slot(i, KindStr, KindOptStr, KindBytes); j < len(a.r.Bufs) {
		return a.r.Bufs[j]
	}
	return nil
}

// Str returns string argument i.
func (a Args) Str(i int) string { return string(a.Bytes(i)) }

// OptStr returns string argument i, nil if absent.
func (a Args) OptStr(i int) *string {
	b := a.Bytes(i)
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// Value is one argument given to [Request.Set].
type Value struct {
	kind Kind // KindInt, KindStr (a string or a buffer) or KindOptStr (absent)
	i    int64
	b    []byte
}

// Int is an integer argument.
func Int[T ~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32](v T) Value {
	return Value{kind: KindInt, i: int64(v)}
}

// Uint64 is an unsigned integer argument, carried in the same 64 bits.
func Uint64(v uint64) Value { return Value{kind: KindInt, i: int64(v)} }

// Bool is a flag argument: 1 or 0.
func Bool(v bool) Value {
	if v {
		return Value{kind: KindInt, i: 1}
	}
	return Value{kind: KindInt}
}

// Str is a string argument.
func Str(s string) Value { return Value{kind: KindStr, b: []byte(s)} }

// OptStr is an optional string argument: nil is absent.
func OptStr(s *string) Value {
	if s == nil {
		return Value{kind: KindOptStr}
	}
	return Str(*s)
}

// Bytes is a buffer argument: nil is absent.
func Bytes(b []byte) Value {
	if b == nil {
		return Value{kind: KindOptStr}
	}
	return Value{kind: KindStr, b: b}
}

// Set makes r a request for op with args, given in the order of the
// operation's entry, reusing r's Ints and Bufs. The tag is left as it
// is. Arguments that do not fit the entry are an error.
func (r *Request) Set(op Op, args ...Value) error {
	s := SpecOf(op)
	if s == nil {
		return fmt.Errorf("wire: unknown operation %d", op)
	}
	if len(args) != len(s.Args) {
		return fmt.Errorf("wire: %s takes %d arguments, not %d", s.Name, len(s.Args), len(args))
	}
	r.Op = op
	r.Ints, r.Bufs = r.Ints[:0], r.Bufs[:0]
	for i, v := range args {
		a := s.Args[i]
		switch {
		case a.Kind == KindInt && v.kind == KindInt:
			r.Ints = append(r.Ints, v.i)
		case a.Kind != KindInt && v.kind == KindStr:
			r.Bufs = append(r.Bufs, v.b)
		case a.Kind != KindInt && a.Kind != KindStr && v.kind == KindOptStr:
			r.Bufs = append(r.Bufs, nil)
		default:
			r.Ints, r.Bufs = r.Ints[:0], r.Bufs[:0]
			return fmt.Errorf("wire: %s argument %s is a %v", s.Name, a.Name, a.Kind)
		}
	}
	return nil
}
