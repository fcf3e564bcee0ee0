package intercept

import (
	"bytes"
	"encoding/binary"
	"math"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// memory reads and writes one caller's memory for one call; what it
// read is wiped when the call is done (arguments carry payloads).
type memory struct {
	pid int
	// out is the caller's memory to write results to: its
	// /proc/<tid>/mem, opened for this call and proved the caller's by
	// the check that the call was still pending after it was opened, so
	// that a write reaches the caller's memory or none, even if the
	// caller is killed meanwhile and its id given to another process.
	// Where it could not be opened (ok false), nothing is
	// written (EFAULT). Never by pid: between a check that the call is
	// pending and a write by pid, the caller may be killed and its pid
	// given to another.
	out struct {
		fd int
		ok bool
	}
	held [][]byte // the arena's: given back at release
	// fetched is what prefetch read ahead of decode's reads, each range
	// as decode will ask for it; emptied with the rest.
	fetched []fetchedRange
	remote  []unix.RemoteIovec // prefetch's, kept from call to call
	local   []unix.Iovec
	// noPrefetch reads every argument on its own, as before prefetch:
	// what the tests compare prefetch with.
	noPrefetch bool
	// payloadFault says that decode's EFAULT came from a payload's
	// bytes, within user space but not readable, rather than from
	// anything the kernel checks before its own copy of them (see
	// Listener.instantiateFault).
	payloadFault bool
}

// fetchedRange is n bytes at addr in the caller, read ahead: their
// bytes, or (probed) only one of each page.
type fetchedRange struct {
	addr   uint64
	n      int
	b      []byte
	probed bool
}

// release wipes what the call read.
func (m *memory) release() {
	m.out.ok = false
	m.payloadFault = false
	for _, b := range m.held {
		secmem.Free(b) // wiped first
	}
	clear(m.held)
	m.held = m.held[:0]
	clear(m.fetched)
	m.fetched = m.fetched[:0]
}

// fetchedAt returns the range read ahead at addr of n bytes, probed or
// read whole, if there is one.
func (m *memory) fetchedAt(addr uint64, n int, probed bool) *fetchedRange {
	for i := range m.fetched {
		if f := &m.fetched[i]; f.addr == addr && f.n == n && f.probed == probed {
			return f
		}
	}
	return nil
}

// fetchedBytes returns the n bytes at addr if they were read ahead.
func (m *memory) fetchedBytes(addr uint64, n int) ([]byte, bool) {
	if f := m.fetchedAt(addr, n, false); f != nil {
		return f.b, true
	}
	return nil, false
}

// read copies n bytes at addr in the caller and returns them; EFAULT if
// the caller has no such memory.
func (m *memory) read(addr uint64, n int) ([]byte, syscall.Errno) {
	if n == 0 {
		return []byte{}, 0
	}
	if addr == 0 {
		return nil, unix.EFAULT
	}
	if b, ok := m.fetchedBytes(addr, n); ok {
		return b, 0
	}
	b := m.take(n)
	got, err := unix.ProcessVMReadv(m.pid,
		[]unix.Iovec{{Base: &b[0], Len: uint64(n)}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err != nil || got != n {
		return nil, unix.EFAULT
	}
	return b, 0
}

// take returns n bytes that release will wipe and give back. They are
// the arena's (secmem), outside Go's heap and locked as far as the
// daemon may lock memory: a payload read from a caller never reaches
// swap on its way to the key that keeps it (the kernel's copy goes to
// slab memory, which is never swapped).
func (m *memory) take(n int) []byte {
	b := secmem.Alloc(n)
	m.held = append(m.held, b)
	return b
}

// probe reports EFAULT unless every page of the n bytes at addr is the
// caller's to read, reading one byte of each (in one system call): what
// the kernel's copy of them would find, without the copy.
func (m *memory) probe(addr uint64, n int) syscall.Errno {
	if n == 0 {
		return 0
	}
	if addr == 0 || addr+uint64(n) < addr {
		return unix.EFAULT
	}
	if m.fetchedAt(addr, n, true) != nil {
		return 0
	}
	remote := probeVec(nil, addr, n)
	local := make([]byte, len(remote))
	for len(remote) > 0 {
		k := min(len(remote), 1024) // IOV_MAX
		got, err := unix.ProcessVMReadv(m.pid, []unix.Iovec{{Base: &local[0], Len: uint64(k)}}, remote[:k], 0)
		if err != nil || got != k {
			return unix.EFAULT
		}
		remote = remote[k:]
	}
	return 0
}

// probeLen is how many bytes probeVec reads of the n bytes at addr.
func probeLen(addr uint64, n int) int { return int((addr+uint64(n)-1)/4096-addr/4096) + 2 }

// probeVec appends to remote one byte of each page of the n bytes at
// addr, and their last byte.
func probeVec(remote []unix.RemoteIovec, addr uint64, n int) []unix.RemoteIovec {
	for p := addr; p < addr+uint64(n); p = (p &^ 4095) + 4096 {
		remote = append(remote, unix.RemoteIovec{Base: uintptr(p), Len: 1})
	}
	return append(remote, unix.RemoteIovec{Base: uintptr(addr + uint64(n) - 1), Len: 1})
}

// readString reads a C string of at most max bytes before its NUL, as
// the kernel's strncpy_from_user and strndup_user do, a page at a time
// so that a string near the end of a mapping is read: EFAULT where the
// memory is not the caller's, EINVAL when no NUL comes within max.
func (m *memory) readString(addr uint64, max int) ([]byte, syscall.Errno) {
	if addr == 0 {
		return nil, unix.EFAULT
	}
	// Never nil: an empty string is present (add_key's "" description, which
	// the asymmetric type replaces), and a nil buffer on the wire is absent.
	out := []byte{}
	for len(out) <= max {
		chunk := pageChunk(addr, max+1-len(out))
		b, fetched := m.fetchedBytes(addr, chunk)
		if !fetched {
			b = make([]byte, chunk)
			got, err := unix.ProcessVMReadv(m.pid,
				[]unix.Iovec{{Base: &b[0], Len: uint64(chunk)}},
				[]unix.RemoteIovec{{Base: uintptr(addr), Len: chunk}}, 0)
			if err != nil || got == 0 {
				clear(b)
				return nil, unix.EFAULT
			}
			b = b[:got]
		}
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		out = append(out, b[:i]...)
		ended := i < len(b)
		addr += uint64(len(b))
		if !fetched {
			clear(b) // the read-ahead's are wiped at release
		}
		if ended {
			return out, 0
		}
	}
	clear(out)
	return nil, unix.EINVAL
}

// pageChunk is how much of want bytes at addr lie on addr's page: what
// readString reads at a time, so that a string near the end of a
// mapping is read, and what prefetch reads of a string's first page.
func pageChunk(addr uint64, want int) int { return min(4096-int(addr%4096), want) }

// stringMax is the most bytes a string argument may hold before its NUL.
func stringMax(a wire.Arg) int {
	if a.Max > 0 {
		return a.Max
	}
	return maxString - 1
}

// write copies b to addr in the caller: EFAULT if it cannot.
//
// Through the caller's /proc/<tid>/mem (m.out), the kernel writes as a
// debugger does: into the caller's private read-only mappings too, where
// its own copy to the caller would fail with EFAULT. That costs nobody
// but the caller, which can write there itself.
func (m *memory) write(addr uint64, b []byte) syscall.Errno {
	if len(b) == 0 {
		return 0
	}
	if !m.out.ok || addr > math.MaxInt64-uint64(len(b)) {
		return unix.EFAULT
	}
	for len(b) > 0 {
		n, err := unix.Pwrite(m.out.fd, b, int64(addr))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return unix.EFAULT
		}
		b, addr = b[n:], addr+uint64(n)
	}
	return 0
}

// Bounds the kernel puts on what it copies in: a page for strings it
// duplicates without a bound of their own, a megabyte for a payload.
const (
	maxString  = 4096
	maxPayload = keyctl.MaxPayload
)

// decode reads a call's arguments as spec lists them, from registers
// args (args[0] is the call's first argument), into a request. With
// lazy, a payload is only probed (its place in the request left nil),
// for the caller to read once it knows it is wanted.
func decode(m *memory, spec *wire.Spec, args *[6]uint64, lazy bool) (*wire.Request, syscall.Errno) {
	switch spec.Op {
	case wire.OpDHCompute:
		return decodeDH(m, args)
	case wire.OpPkeyEncrypt, wire.OpPkeyDecrypt, wire.OpPkeySign, wire.OpPkeyVerify:
		return decodePkey(m, spec.Op, args)
	}
	// A payload's length is checked before any argument is read, as
	// add_key checks it before it copies its type and description.
	for _, a := range spec.Args {
		if a.Kind == wire.KindBytes && args[a.Reg] > maxPayload {
			return nil, unix.EINVAL
		}
	}
	m.prefetch(spec, args, lazy)
	req := &wire.Request{Op: spec.Op}
	for _, a := range spec.Args {
		reg := args[a.Reg-1]
		switch a.Kind {
		case wire.KindInt:
			// The kernel takes each as a 32-bit key_serial_t, uid_t,
			// gid_t, key_perm_t or unsigned: -1 stays -1.
			req.Ints = append(req.Ints, int64(int32(uint32(reg))))
		case wire.KindStr, wire.KindOptStr:
			if reg == 0 && a.Kind == wire.KindOptStr {
				req.Bufs = append(req.Bufs, nil)
				continue
			}
			s, errno := m.readString(reg, stringMax(a))
			if errno != 0 {
				return nil, errno
			}
			req.Bufs = append(req.Bufs, s)
		case wire.KindBytes:
			n := args[a.Reg]
			switch {
			case n == 0:
				req.Bufs = append(req.Bufs, nil)
			case n > maxPayload:
				return nil, unix.EINVAL
			case lazy:
				if errno := m.probe(reg, int(n)); errno != 0 {
					return nil, errno
				}
				req.Bufs = append(req.Bufs, nil)
			default:
				b, errno := m.read(reg, int(n))
				if errno != 0 {
					m.payloadFault = errno == unix.EFAULT && userRange(reg, n)
					return nil, errno
				}
				req.Bufs = append(req.Bufs, b)
			}
		}
	}
	return req, 0
}

// prefetch reads ahead, in one system call, what decode's loop will read
// first from the caller: the first page of each string argument (to its
// end, or as far as the string may run) and each payload whole (lazy:
// one byte of each of its pages), up to the first argument refused
// before it is read. A system call is the dear part of a read (several
// microseconds in a guest without hardware nested paging), and add_key
// reads three things. Only when all of it reads are the bytes kept:
// otherwise decode reads each thing itself, and meets the fault, and so
// the error, in the kernel's order. A call that reads one thing is left
// to decode, which reads it into a buffer of the arena.
func (m *memory) prefetch(spec *wire.Spec, args *[6]uint64, lazy bool) {
	if m.noPrefetch {
		return
	}
	const maxVec = 1024 // IOV_MAX, for either side
	ranges, pages := m.fetched[:0], 0
plan:
	for _, a := range spec.Args {
		reg := args[a.Reg-1]
		switch a.Kind {
		case wire.KindStr, wire.KindOptStr:
			if reg == 0 {
				if a.Kind == wire.KindOptStr {
					continue
				}
				break plan
			}
			ranges = append(ranges, fetchedRange{addr: reg, n: pageChunk(reg, stringMax(a)+1)})
			pages++
		case wire.KindBytes:
			n := args[a.Reg]
			switch {
			case n == 0:
				continue
			case n > maxPayload || reg == 0 || reg+n < reg:
				break plan
			}
			ranges = append(ranges, fetchedRange{addr: reg, n: int(n), probed: lazy})
			if lazy {
				pages += probeLen(reg, int(n))
			} else {
				pages++
			}
		}
	}
	if len(ranges) < 2 || pages > maxVec {
		clear(ranges)
		return
	}
	remote, local := m.remote[:0], m.local[:0]
	want := 0
	for i := range ranges {
		f := &ranges[i]
		var b []byte
		if f.probed {
			k := len(remote)
			remote = probeVec(remote, f.addr, f.n)
			b = m.take(len(remote) - k)
		} else {
			b = m.take(f.n)
			f.b = b
			remote = append(remote, unix.RemoteIovec{Base: uintptr(f.addr), Len: f.n})
		}
		local = append(local, unix.Iovec{Base: &b[0], Len: uint64(len(b))})
		want += len(b)
	}
	m.remote, m.local = remote, local
	got, err := unix.ProcessVMReadv(m.pid, local, remote, 0)
	clear(remote) // addresses in the caller, and
	clear(local)  // buffers wiped at release: neither kept past the call
	if err != nil || got != want {
		clear(ranges)
		return
	}
	m.fetched = ranges
}

// decodeDH reads KEYCTL_DH_COMPUTE's structures: keyctl(DH_COMPUTE,
// struct keyctl_dh_params *params, char *buffer, size_t buflen, struct
// keyctl_kdf_params *kdf), in the order of wire's entry: private, prime,
// base, buflen, hash (absent without a KDF), otherinfo.
func decodeDH(m *memory, args *[6]uint64) (*wire.Request, syscall.Errno) {
	params, errno := m.read(args[1], 12) // three key_serial_t
	if errno != 0 {
		return nil, errno
	}
	req := &wire.Request{Op: wire.OpDHCompute}
	for i := range 3 {
		req.Ints = append(req.Ints, int64(int32(binary.NativeEndian.Uint32(params[4*i:]))))
	}
	req.Ints = append(req.Ints, int64(args[3])) // buflen, a size_t
	if args[4] == 0 {
		req.Bufs = append(req.Bufs, nil, nil)
		return req, 0
	}
	// struct keyctl_kdf_params: hashname, otherinfo, otherinfolen and
	// eight spare words, which must be zero.
	kdf, errno := m.read(args[4], 8+8+4+32)
	if errno != 0 {
		return nil, errno
	}
	for _, b := range kdf[20:52] {
		if b != 0 {
			return nil, unix.EINVAL
		}
	}
	hashAt := binary.NativeEndian.Uint64(kdf)
	infoAt, infoLen := binary.NativeEndian.Uint64(kdf[8:]), binary.NativeEndian.Uint32(kdf[16:])
	hash, errno := m.readString(hashAt, 127) // CRYPTO_MAX_ALG_NAME, its NUL counted
	if errno != 0 {
		return nil, errno
	}
	if infoLen > 64 {
		return nil, unix.EMSGSIZE // KEYCTL_KDF_MAX_OI_LEN
	}
	info, errno := m.read(infoAt, int(infoLen))
	if errno != 0 {
		return nil, errno
	}
	req.Bufs = append(req.Bufs, hash, info)
	return req, 0
}

// decodePkey reads the pkey operations' arguments: keyctl(OP, const
// struct keyctl_pkey_params *params, const char *info, const void *in,
// void *out_or_in2), the structure holding the key, the input's length
// and the output's (verify: the signature's), then seven spare words,
// which the kernel ignores. The lengths are the kernel's 32-bit fields; the
// sizes a key reports are 16-bit, so a longer input is refused here, as
// the kernel refuses it, before a byte of it is read.
func decodePkey(m *memory, op wire.Op, args *[6]uint64) (*wire.Request, syscall.Errno) {
	params, errno := m.read(args[1], 4+4+4+28)
	if errno != 0 {
		return nil, errno
	}
	id := int64(int32(binary.NativeEndian.Uint32(params)))
	inLen, outLen := binary.NativeEndian.Uint32(params[4:]), binary.NativeEndian.Uint32(params[8:])
	info, errno := m.readString(args[2], keyctl.MaxPkeyInfo)
	if errno != 0 {
		return nil, errno
	}
	if inLen > math.MaxUint16 || op == wire.OpPkeyVerify && outLen > math.MaxUint16 {
		return nil, unix.EINVAL
	}
	in, errno := m.read(args[3], int(inLen))
	if errno != 0 {
		return nil, errno
	}
	req := &wire.Request{Op: op, Ints: []int64{id}, Bufs: [][]byte{info, in}}
	if op == wire.OpPkeyVerify {
		sig, errno := m.read(args[4], int(outLen))
		if errno != 0 {
			return nil, errno
		}
		req.Bufs = append(req.Bufs, sig)
		return req, 0
	}
	req.Ints = append(req.Ints, int64(outLen))
	return req, 0
}

// decodeIOV reads KEYCTL_INSTANTIATE_IOV's arguments (key, const struct
// iovec *iov, unsigned ioc, ringid) as KEYCTL_INSTANTIATE's, its payload
// gathered from the iovec as the kernel's import_iovec gathers it. Every
// length is the caller's, and checked before it is used, in the kernel's
// order:
//
//   - more than UIO_MAXIOV segments: EINVAL;
//   - any length negative as a ssize_t: EINVAL, for every segment before
//     any is placed;
//   - a segment that does not lie within user space: EFAULT (a lone
//     segment's length is first cut to MAX_RW_COUNT, as the kernel cuts
//     it);
//   - more than a payload's bound in all: EINVAL.
//
// Only then is any segment read, so that no sum wraps around to a small
// one and no length is trusted with an allocation.
func decodeIOV(m *memory, args *[6]uint64) (*wire.Request, syscall.Errno) {
	req := &wire.Request{Op: wire.OpInstantiate, Ints: []int64{int64(int32(uint32(args[1]))), int64(int32(uint32(args[4])))}}
	iovAt, ioc := args[2], args[3]
	if iovAt == 0 || ioc == 0 {
		req.Bufs = append(req.Bufs, nil)
		return req, 0
	}
	if ioc > 1024 {
		return nil, unix.EINVAL
	}
	vec, errno := m.read(iovAt, int(16*ioc))
	if errno != 0 {
		return nil, errno
	}
	seg := func(i int) (base, n uint64) {
		return binary.NativeEndian.Uint64(vec[16*i:]), binary.NativeEndian.Uint64(vec[16*i+8:])
	}
	for i := range int(ioc) {
		if _, n := seg(i); int64(n) < 0 {
			return nil, unix.EINVAL
		}
	}
	var total uint64
	for i := range int(ioc) {
		base, n := seg(i)
		if ioc == 1 {
			n = min(n, maxRWCount)
		}
		if !userRange(base, n) {
			return nil, unix.EFAULT
		}
		// Each below userTop: a thousand of them cannot wrap.
		total += n
	}
	if total > maxPayload {
		return nil, unix.EINVAL
	}
	payload := m.take(int(total))
	at := 0
	for i := range int(ioc) {
		base, n := seg(i)
		b, errno := m.read(base, int(n))
		if errno != 0 {
			m.payloadFault = errno == unix.EFAULT
			return nil, errno
		}
		at += copy(payload[at:], b)
	}
	req.Bufs = append(req.Bufs, payload)
	return req, 0
}

// maxRWCount is the most one read or write moves (MAX_RW_COUNT: INT_MAX
// rounded down to a page), to which the kernel cuts a lone segment.
const maxRWCount = math.MaxInt32 &^ 4095

// userRange reports whether the n bytes at addr lie within user space,
// as the kernel's access_ok asks before it copies anything: no
// wrap-around, and an end no higher than userTop (an empty range at
// userTop is within it, one past it is not).
func userRange(addr, n uint64) bool {
	end := addr + n
	return end >= addr && end <= userTop
}

// encode writes a successful answer's results where the call wants them
// and returns the call's value: the length of a buffer result (copied
// into the caller's buffer if it fits whole, as keyctl_read_key and
// keyctl_describe_key copy, or as far as it fits where the table says
// so), else the first integer (a serial), else 0.
func encode(m *memory, spec *wire.Spec, args *[6]uint64, resp *wire.Response) (int64, syscall.Errno) {
	res := spec.Result
	if res.Sized && len(resp.Bufs) > 0 && len(resp.Ints) > 0 {
		// The daemon bounded the answer by the size the call gave.
		if e := m.write(args[res.BufReg-1], resp.Bufs[0]); e != 0 {
			return 0, e
		}
		return resp.Ints[0], 0
	}
	if res.BufReg != 0 && len(resp.Bufs) > 0 {
		data := resp.Bufs[0]
		n := len(data)
		if res.Text {
			n++
		}
		ptr, size := args[res.BufReg-1], args[res.BufReg]
		if ptr != 0 && size > 0 && (size >= uint64(n) || res.Partial) {
			out := data
			if res.Text {
				out = m.take(n)
				copy(out, data)
			}
			if e := m.write(ptr, out[:min(uint64(len(out)), size)]); e != 0 {
				return 0, e
			}
		}
		if res.Ints > 0 && len(resp.Ints) > 0 {
			return resp.Ints[0], 0 // the length the call reports (dh_compute's)
		}
		return int64(n), 0
	}
	if res.Ints > 0 && len(resp.Ints) > 0 {
		return resp.Ints[0], 0
	}
	return 0, 0
}
