package secmem

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"unsafe"
)

// Every size gets its own zeroed memory in the arena, which Free wipes
// and hands out again.
func TestArenaAllocFree(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no arena without mmap")
	}
	for _, n := range []int{1, 15, 16, 17, 100, 128, 129, 1000, 4096, 32767 + 48, slabSize - 1, slabSize, slabSize + 1, 1 << 20} {
		b := Alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if !inArena(b) {
			t.Fatalf("Alloc(%d) is outside the arena", n)
		}
		if !bytes.Equal(b, make([]byte, n)) {
			t.Fatalf("Alloc(%d) is not zeroed", n)
		}
		for i := range b {
			b[i] = 0xA5
		}
		p := unsafe.SliceData(b)
		Free(b)
		c := Alloc(n)
		if unsafe.SliceData(c) != p {
			t.Errorf("Alloc(%d) after Free got other memory", n)
		}
		if !bytes.Equal(c, make([]byte, n)) {
			t.Fatalf("Alloc(%d) after Free is not wiped", n)
		}
		Free(c)
	}
}

func inArena(b []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return the.base != nil && p >= uintptr(the.base) && p-uintptr(the.base) < the.size
}

// Chunks never overlap, whoever allocates and frees them at once.
func TestArenaConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var held [][]byte
			for i := range 2000 {
				n := 1 + (i*37+g*101)%3000
				b := Alloc(n)
				for j := range b {
					b[j] = byte(g)
				}
				held = append(held, b)
				if i%3 == 0 {
					h := held[0]
					for _, x := range h {
						if x != byte(g) {
							t.Errorf("goroutine %d: a chunk was overwritten", g)
							return
						}
					}
					Free(h)
					held = held[1:]
				}
			}
			for _, h := range held {
				Free(h)
			}
		})
	}
	wg.Wait()
}

// What the arena maps is locked where the memory lock limit allows.
func TestArenaLocked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	b := Alloc(100)
	defer Free(b)
	st := Stats()
	if st.Mapped == 0 || st.Locked+st.Unlocked != st.Mapped {
		t.Fatalf("stats %+v", st)
	}
	if ok, _ := CanLockAll(); ok && st.Locked == 0 && !st.LockedAll {
		t.Errorf("nothing locked though the process may lock without bound: %+v", st)
	}
}

// Copy copies as the built-in copy does, whatever the sizes and
// alignments, and within one buffer towards its front.
func TestCopy(t *testing.T) {
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 7, 16, 31, 64, 129, 257, 2049, 65536} {
		for _, off := range []int{0, 1, 5} {
			dst := make([]byte, n+off)
			if k := Copy(dst[off:], src[3:3+n]); k != n || !bytes.Equal(dst[off:], src[3:3+n]) {
				t.Fatalf("%d bytes at %d: copied %d, wrong", n, off, k)
			}
			buf := append([]byte(nil), src[:n+off]...)
			Copy(buf, buf[off:])
			if !bytes.Equal(buf[:n], src[off:off+n]) {
				t.Fatalf("%d bytes moved %d to the front: wrong", n, off)
			}
		}
	}
	if k := Copy(make([]byte, 3), src); k != 3 {
		t.Fatalf("into 3 bytes: %d", k)
	}
	WipeRegisters() // and the program goes on
}
