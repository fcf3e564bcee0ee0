package intercept

import (
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// Reading a call's arguments ahead in one system call changes nothing
// that decode returns: for add_key's strings and payload placed anywhere
// in four pages, the first readable, the second readable, the third
// PROT_NONE, the fourth unmapped (and the null pointer), with lengths
// around the page, the string bounds and the lazy payload's, decode
// gives the same request, or the same errno, with prefetch and without.
func TestPrefetchDecodesAsReadsOneByOne(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	base := uintptr(unsafe.Pointer(&mem[0]))
	if err := unix.Mprotect(mem[2*4096:3*4096], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, base+3*4096, 4096, 0); e != 0 {
		t.Fatal(e)
	}
	spec := wire.SpecOf(wire.OpAddKey)
	pid := os.Getpid()
	rapid.Check(t, func(t *rapid.T) {
		// What the two readable pages hold: bytes, some of them NULs.
		for i := range 2 * 4096 {
			mem[i] = 'a'
		}
		for range rapid.IntRange(0, 6).Draw(t, "nuls") {
			mem[rapid.IntRange(0, 2*4096-1).Draw(t, "nul")] = 0
		}
		at := func(label string) uint64 {
			if rapid.IntRange(0, 15).Draw(t, label+" null") == 0 {
				return 0
			}
			return uint64(base) + uint64(rapid.IntRange(0, 4*4096-1).Draw(t, label))
		}
		n := rapid.SampledFrom([]uint64{0, 1, 7, 4095, 4096, 4097, keyctl.MaxUserPayload, keyctl.MaxUserPayload + 1,
			40000, keyctl.MaxPayload, keyctl.MaxPayload + 1}).Draw(t, "length")
		args := [6]uint64{at("type"), at("description"), at("payload"), n, uint64(0xfffffffd)}
		lazy := n > keyctl.MaxUserPayload && n <= maxPayload

		decodeWith := func(noPrefetch bool) (*wire.Request, syscall.Errno) {
			m := memory{pid: pid, noPrefetch: noPrefetch}
			req, errno := decode(&m, spec, &args, lazy)
			if req != nil {
				// Copies: release wipes what decode read.
				for i, b := range req.Bufs {
					if b != nil {
						req.Bufs[i] = slices.Clone(b)
					}
				}
			}
			m.release()
			return req, errno
		}
		want, wantErr := decodeWith(true)
		got, gotErr := decodeWith(false)
		if gotErr != wantErr {
			t.Fatalf("errno %v with prefetch, %v without", gotErr, wantErr)
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("request %v with prefetch, %v without", got, want)
		}
		if got == nil {
			return
		}
		if !slices.Equal(got.Ints, want.Ints) || len(got.Bufs) != len(want.Bufs) {
			t.Fatalf("request %+v with prefetch, %+v without", got, want)
		}
		for i := range got.Bufs {
			if (got.Bufs[i] == nil) != (want.Bufs[i] == nil) || string(got.Bufs[i]) != string(want.Bufs[i]) {
				t.Fatalf("buffer %d: %q with prefetch, %q without", i, got.Bufs[i], want.Bufs[i])
			}
		}
	})
}

// A call that reads one large payload leaves it to decode, which reads it
// into the listener's kept buffer: serving a megabyte allocates nothing
// of that size, call after call.
func TestOnePayloadReadsIntoTheKeptBuffer(t *testing.T) {
	payload := make([]byte, 1<<20-1)
	args := [6]uint64{unix.KEYCTL_UPDATE, 12345, uint64(uintptr(unsafe.Pointer(&payload[0]))), uint64(len(payload))}
	spec := wire.SpecOf(wire.OpUpdate)
	m := memory{pid: os.Getpid()}
	serve := func() {
		if _, errno := decode(&m, spec, &args, false); errno != 0 {
			t.Fatal(errno)
		}
		m.release()
	}
	serve()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		serve()
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("ten calls of a megabyte allocated %d bytes", got)
	}
	runtime.KeepAlive(payload)
}
