package procfs

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// /proc/<pid>/stat lines, the command names of which a process chooses:
// spaces and parentheses in them do not shift the fields.
func TestParseStat(t *testing.T) {
	line := func(comm string) []byte {
		return []byte("4242 (" + comm + ") S 17 4242 4242 0 -1 4194560 150 0 0 0 1 2 0 0 20 0 1 0 987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	}
	for _, comm := range []string{"ukeyctl", "a b", ") S 1 2 3 (", "((", "x) 99 99 99"} {
		st, ok := ParseStat(line(comm))
		if !ok || st.PPID != 17 || st.SID != 4242 || st.Start != "987654" {
			t.Errorf("comm %q: %+v %v", comm, st, ok)
		}
	}
	for _, bad := range []string{"", "4242 ukeyctl S 17", "4242 (x) S 17 1 2", "4242 (x) S -1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 5 0"} {
		if st, ok := ParseStat([]byte(bad)); ok {
			t.Errorf("%q parsed as %+v", bad, st)
		}
	}
	sid, _ := unix.Getsid(0)
	if st, ok := ReadStat(os.Getpid()); !ok || st.PPID != os.Getppid() || st.SID != sid {
		t.Errorf("this process's own stat: %+v %v, parent %d, session %d", st, ok, os.Getppid(), sid)
	}
}

// Whatever a command name or a damaged file holds, parsing never panics,
// and what it accepts has a parent pid that is a number and a start
// time of digits.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"))
	f.Add([]byte("7 (a) b)) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := ParseStat(b)
		if !ok {
			return
		}
		if st.PPID < 0 || st.Start == "" {
			t.Fatalf("%q parsed as %+v", b, st)
		}
		for _, c := range st.Start {
			if c < '0' || c > '9' {
				t.Fatalf("start time %q", st.Start)
			}
		}
	})
}
