package procfs

import (
	"bytes"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\tsh\nTgid:\t42\nUid:\t1000\t1001\t1002\t1003\nGid:\t100\t100\t100\t101\n" +
		"Groups:\t4 24 \nThreads:\t3\nCapInh:\t0000000000000080\nCapEff:\t0000000000200080\n"
	st, ok := ParseStatus([]byte(status))
	if !ok || st.Tgid != 42 || st.UIDs != [4]uint32{1000, 1001, 1002, 1003} || st.GIDs != [4]uint32{100, 100, 100, 101} ||
		!slices.Equal(st.Groups, []uint32{4, 24}) || st.Threads != 3 || !st.HasCapEff || st.CapEff != 1<<21|1<<7 {
		t.Fatalf("%+v %v", st, ok)
	}
	for _, bad := range []string{
		"",
		"Uid:\t1\t2\t3\nGid:\t1\t1\t1\t1\nThreads:\t1\n",                 // three uids
		"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\n",                           // no Threads
		"Uid:\tx\t1\t1\t1\nGid:\t1\t1\t1\t1\nThreads:\t1\n",              // not a number
		"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nThreads:\t0\n",              // no thread
		"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nThreads:\t1\nCapEff:\tzz\n", // bad capabilities
		"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nThreads:\t1\nCapEff:\t10000000000000000\n",
		"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nThreads:\t1\nGroups:\t-1\n",
	} {
		if st, ok := ParseStatus([]byte(bad)); ok {
			t.Errorf("%q parsed as %+v", bad, st)
		}
	}
	if runtime.GOOS != "linux" {
		return
	}
	st, ok = ReadStatus(os.Getpid())
	if !ok || st.Tgid != os.Getpid() || st.UIDs[1] != uint32(os.Geteuid()) || st.Threads < 1 || !st.HasCapEff {
		t.Fatalf("this process: %+v %v", st, ok)
	}
}

// Whatever a status file holds, parsing never panics, and what it
// accepts has a thread and took its capabilities from a CapEff line.
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nThreads:\t3\n"))
	f.Add([]byte("Tgid:\t7\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t1 2\nThreads:\t1\nCapEff:\t000001ffffffffff\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := ParseStatus(b)
		if ok && st.Threads < 1 {
			t.Fatalf("%q: %+v", b, st)
		}
		if ok && st.HasCapEff && !bytes.Contains(b, []byte("CapEff:")) {
			t.Fatalf("%q gave capabilities %x", b, st.CapEff)
		}
	})
}

// ReadFile reads a /proc file whole, however long, and says which file
// it could not open.
func TestReadFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc here")
	}
	want, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	got, err := ReadFile("/proc/self/maps")
	if err != nil || len(got) < len(want)/2 || !bytes.HasPrefix(got, want[:min(len(want), 20)]) {
		t.Fatalf("%d bytes (%v), os.ReadFile %d", len(got), err, len(want))
	}
	if _, err := ReadFile("/proc/0/stat"); err == nil || !strings.Contains(err.Error(), "/proc/0/stat") {
		t.Fatalf("a missing file: %v", err)
	}
}
