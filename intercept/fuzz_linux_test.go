package intercept

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// fuzzRegion is the caller's memory the fuzz target lays its input in:
// four pages, the first two readable, the third PROT_NONE, the fourth
// unmapped.
const fuzzRegion = 4 * 4096

// relocMark marks an 8-byte word of the fuzzed memory that holds an
// address in the region (its low 16 bits the offset), so that seeds can
// hold pointers (an iovec's, keyctl_dh_params' strings) although the
// region lands somewhere else in each process.
const relocMark = 0xfeed << 48

// Every register and every byte of memory a key call hands the listener
// is the caller's to choose. Whatever they are, decoding the call as the
// listener does (callSpec, then decodeCall) ends in a request its spec
// accepts or in an errno, never in a panic, and takes no more memory
// than the largest payload a call may carry could need, whatever lengths
// the caller claims.
func FuzzDecodeCall(f *testing.F) {
	mem, err := unix.Mmap(-1, 0, fuzzRegion, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Munmap(mem) })
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	if err := unix.Mprotect(mem[2*4096:3*4096], unix.PROT_NONE); err != nil {
		f.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(base)+3*4096, 4096, 0); e != 0 {
		f.Fatal(e)
	}
	readable := mem[:2*4096]

	// Seeds: each call with its arguments in the region (ptrs says which
	// registers are offsets into it), the memory holding strings, and an
	// iovec whose pointers are relocated.
	word := func(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }
	strs := []byte("user\x00desc\x00payload\x00")
	words := func(v ...uint64) (b []byte) {
		for _, w := range v {
			b = append(b, word(w)...)
		}
		return b
	}
	iov := words(relocMark|0, 4, relocMark|5, 3)
	wrap := words(relocMark|0, 1<<63, relocMark|5, 1<<63+3)
	kdf := append(words(relocMark|0, relocMark|5, 4), make([]byte, 36)...)
	f.Add(uint8(wire.SysAddKey), uint64(0), uint64(5), uint64(10), uint64(7), uint64(0xfffffffd), uint8(0b0111), strs)
	f.Add(uint8(wire.SysAddKey), uint64(0), uint64(5), uint64(10), uint64(keyctl.MaxUserPayload+1), uint64(0xfffffffd), uint8(0b0111), strs)
	f.Add(uint8(wire.SysAddKey), uint64(0), uint64(4090), uint64(10), uint64(8190), uint64(0xfffffffd), uint8(0b0111), strs)
	f.Add(uint8(wire.SysRequestKey), uint64(0), uint64(5), uint64(0), uint64(0xfffffffd), uint64(0), uint8(0b0111), strs)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_SEARCH), uint64(0xfffffffd), uint64(0), uint64(5), uint64(0), uint8(0b1100), strs)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_UPDATE), uint64(12), uint64(10), uint64(7), uint64(0), uint8(0b0100), strs)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_INSTANTIATE_IOV), uint64(12), uint64(0), uint64(2), uint64(0), uint8(0b0100), iov)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_INSTANTIATE_IOV), uint64(12), uint64(0), uint64(2), uint64(0), uint8(0b0100), wrap)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_DH_COMPUTE), uint64(0), uint64(100), uint64(64), uint64(200), uint8(0b10110), kdf)
	f.Add(uint8(wire.SysKeyctl), uint64(unix.KEYCTL_PKEY_VERIFY), uint64(0), uint64(5), uint64(0), uint64(0), uint8(0b11110), strs)

	f.Fuzz(func(t *testing.T, sys uint8, a0, a1, a2, a3, a4 uint64, ptrs uint8, data []byte) {
		sysc := wire.Syscall(sys % 4) // NoSyscall carries nothing
		args := [6]uint64{a0, a1, a2, a3, a4}
		for i := range args {
			if ptrs&(1<<i) != 0 {
				args[i] = base + args[i]%fuzzRegion
			}
		}
		clear(readable)
		copy(readable, data)
		for i := 0; i+8 <= len(readable); i += 8 {
			if w := binary.NativeEndian.Uint64(readable[i:]); w>>48 == relocMark>>48 {
				binary.NativeEndian.PutUint64(readable[i:], base+w&0xffff)
			}
		}
		spec := callSpec(sysc, &args)
		if spec == nil {
			return
		}
		m := memory{pid: os.Getpid()}
		defer m.release()
		req, lazy, errno := decodeCall(&m, sysc, spec, &args)
		held := 0
		for _, b := range m.held {
			held += cap(b)
		}
		if held > 2*maxPayload+64<<10 {
			t.Fatalf("%s: decoding took %d bytes", spec.Name, held)
		}
		if errno != 0 {
			if req != nil {
				t.Fatalf("%s: a request and errno %v", spec.Name, errno)
			}
			return
		}
		if req == nil || req.Op != spec.Op {
			t.Fatalf("%s: decoded as %+v", spec.Name, req)
		}
		if lazy {
			// The payload is read once the daemon has agreed to it.
			req.Bufs[2] = make([]byte, args[3])
		}
		if _, err := spec.Check(req); err != nil {
			t.Fatalf("%s: the request decoded does not fit its spec: %v", spec.Name, err)
		}
		for i, b := range req.Bufs {
			if len(b) > maxPayload {
				t.Fatalf("%s: buffer %d holds %d bytes", spec.Name, i, len(b))
			}
		}
	})
}
