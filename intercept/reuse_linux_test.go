package intercept_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/wire"
)

const reuseEnv = "INTERCEPT_REUSE_CHILD"

// reuseAddr is an address both the caller and the victim map, at which
// the caller asks for a key's payload.
const reuseAddr = 0x7e0000000000

func init() {
	switch os.Getenv(reuseEnv) {
	case "caller":
		os.Exit(reuseCaller())
	case "victim":
		os.Exit(reuseVictim())
	}
}

func mapFixed() ([]byte, error) {
	p, _, e := unix.Syscall6(unix.SYS_MMAP, reuseAddr, 4096, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if e != 0 {
		return nil, e
	}
	// The mapping is the kernel's, not Go's: its address read as a
	// pointer (vet's pattern for a system call's result).
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), 4096), nil
}

func reuseCaller() int {
	runtime.LockOSThread()
	buf, err := mapFixed()
	if err != nil {
		fmt.Println("mmap:", err)
		return 1
	}
	fd, err := intercept.Install()
	if err != nil {
		fmt.Println("install:", err)
		return 1
	}
	if err := intercept.SendListener(3, fd); err != nil {
		return 1
	}
	unix.Close(fd)
	var w [1]byte
	unix.Read(3, w[:])
	// keyctl(KEYCTL_READ, 1234, reuseAddr, 64): the result is to go to reuseAddr.
	unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, 1234, uintptr(unsafe.Pointer(&buf[0])), 64, 0, 0)
	fmt.Println("the call returned")
	return 0
}

func reuseVictim() int {
	buf, err := mapFixed()
	if err != nil {
		fmt.Println("mmap:", err)
		return 1
	}
	copy(buf, "victim's own data")
	fmt.Printf("ready %d\n", os.Getpid())
	// Wait for the parent to say the listener has answered.
	var w [1]byte
	os.Stdin.Read(w[:])
	fmt.Printf("victim memory: %q\n", bytes.TrimRight(buf[:64], "\x00"))
	return 0
}

// A caller killed while the handler serves its call frees its thread id,
// and a process that is given the same id must not receive the call's
// results: once, the listener wrote them by pid (process_vm_writev), so
// that bytes chosen by the caller (a Diffie-Hellman result, a key it
// owns) landed at an address it chose in another process. Results now go
// through the caller's /proc/<pid>/mem, opened before the call was proved
// pending, which reaches the caller's memory or none. The id is reused
// here by setting ns_last_pid (root); an attacker cycles through
// pid_max.
func TestResultsNeverReachAProcessThatReusedTheCallersID(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	caller := exec.Command(os.Args[0], "-test.run=^$")
	caller.Env = append(os.Environ(), reuseEnv+"=caller")
	caller.ExtraFiles = []*os.File{theirs}
	cout := new(bytes.Buffer)
	caller.Stdout, caller.Stderr = cout, cout
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	defer caller.Process.Kill()
	theirs.Close()
	fd, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		caller.Wait()
		t.Fatalf("no listener: %v %s", err, cout)
	}

	inCall, release := make(chan intercept.Caller), make(chan struct{})
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		inCall <- c
		<-release // the handler takes its time (dh_compute, an upcall, a queue)
		data := []byte("bytes the caller chose")
		return &wire.Response{Ints: []int64{int64(len(data))}, Bufs: [][]byte{data}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	ours.Write([]byte{1})
	c := <-inCall
	// The caller dies while the handler runs.
	caller.Process.Kill()
	caller.Wait()

	// A new process gets the same id.
	var victim *exec.Cmd
	var vin io.WriteCloser
	var vout *bufio.Reader
	for try := 0; try < 20 && victim == nil; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(c.Tid-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid (ns_last_pid, root): %v", err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), reuseEnv+"=victim")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid != c.Tid {
			cmd.Process.Kill()
			cmd.Wait()
			continue
		}
		victim, vin, vout = cmd, stdin, bufio.NewReader(stdout)
	}
	if victim == nil {
		t.Skip("another process took the caller's id each time")
	}
	defer victim.Process.Kill()
	if line, _ := vout.ReadString('\n'); !strings.HasPrefix(line, "ready") {
		t.Fatalf("victim: %q", line)
	}

	close(release) // the handler answers, for a caller that is gone
	l.Close()      // which returns once the answer is written, or not
	<-served
	vin.Write([]byte{1})
	line, _ := vout.ReadString('\n')
	victim.Wait()
	if want := "victim memory: \"victim's own data\"\n"; line != want {
		t.Errorf("the listener wrote a killed caller's result into process %d, which made no call: %q", c.Tid, line)
	}
}
