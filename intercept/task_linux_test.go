package intercept

import (
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// A thread keeps its task number from call to call; another thread, or a
// thread that has exited and whose id is met again, gets a number never
// given before.
func TestTaskNumbers(t *testing.T) {
	var ts tasks
	defer ts.close()
	ip := uint64(reflect.ValueOf(TestTaskNumbers).Pointer()) // mapped here
	read := func(tid int) uint64 {
		t.Helper()
		_, c, errno := ts.read(tid, ip, true)
		c.end()
		if errno != 0 {
			t.Fatalf("read %d: %v", tid, errno)
		}
		task := c.tv.task
		if task == 0 {
			t.Fatalf("read %d: task 0", tid)
		}
		return task
	}
	self := read(os.Getpid())
	if again := read(os.Getpid()); again != self {
		t.Fatalf("the same thread read twice: task %d, then %d", self, again)
	}

	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	var other uint64
	if _, c, errno := ts.read(pid, 0, true); errno == 0 {
		c.end()
		other = c.tv.task
	} else {
		t.Fatalf("read the child: %v", errno)
	}
	if other == self {
		t.Fatalf("two tasks given one number, %d", self)
	}
	if identities() {
		// The kernel's identity of a task: the same to a listener that
		// has forgotten it, or never met it.
		var fresh tasks
		defer fresh.close()
		if _, c, errno := fresh.read(os.Getpid(), ip, true); errno != 0 || c.tv.task != self {
			c.end()
			t.Fatalf("this thread read afresh: task %d (%v), first %d", c.tv.task, errno, self)
		} else {
			c.end()
		}
	}
	child.Process.Kill()
	child.Wait()
	// The child's kept descriptor reads nothing now: were its id met
	// again, it would be opened afresh, and numbered afresh.
	if _, _, ok := ts.readStatus(pid); ok {
		t.Fatalf("an exited task's status read")
	}
	if _, kept := ts.status[pid]; kept {
		t.Fatalf("an exited task's descriptor is kept")
	}
}

// A process's exec is shown by the memory its last call ran in, which
// no longer maps the new program's code; the process's view is found by
// the kernel's identity of the process, or, without one (before Linux
// 6.9), by its pid while a pidfd shows that process alive.
func TestExecShownByTheWitness(t *testing.T) {
	for _, withIDs := range []bool{true, false} {
		t.Run(map[bool]string{true: "identities", false: "by pid"}[withIDs], func(t *testing.T) {
			if withIDs && !identities() {
				t.Skip("no pidfs identities on this kernel (Linux 6.9)")
			}
			if !withIDs {
				saved := identities
				identities = func() bool { return false }
				defer func() { identities = saved }()
			}
			testExecShown(t)
		})
	}
}

func testExecShown(t *testing.T) {
	child := exec.Command("sh", "-c", "read x; exec sleep 60")
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	pid := child.Process.Pid
	var ts tasks
	defer ts.close()
	call := func(ip uint64) bool {
		t.Helper()
		_, c, errno := ts.read(pid, ip, false)
		defer c.end()
		if errno != 0 {
			t.Fatalf("read: %v", errno)
		}
		return ts.commit(&c)
	}
	old := mappings(t, pid)
	if call(old[0][0]) || call(old[0][0]) {
		t.Fatal("an exec shown before any")
	}
	in.Write([]byte("\n"))
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(b) == "sleep\n" {
			break
		}
		if i > 500 {
			t.Fatal("the child did not exec")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ip uint64
	for _, m := range mappings(t, pid) {
		if !slices.ContainsFunc(old, func(o [2]uint64) bool { return m[0] < o[1] && o[0] < m[1] }) {
			ip = m[0]
			break
		}
	}
	if ip == 0 {
		t.Skip("the new program maps nothing the old one did not")
	}
	if !call(ip) {
		t.Fatal("the exec was not shown")
	}
	if call(ip) {
		t.Fatal("the exec was shown twice")
	}
}

// mappings are the address ranges process pid maps.
func mappings(t *testing.T, pid int) [][2]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]uint64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil {
			out = append(out, [2]uint64{lo, hi})
		}
	}
	return out
}

// Without the kernel's identities, a process's view is found by its pid
// only while a pidfd shows the process it was made for alive: a process
// given the pid of one that has exited starts afresh (no exec shown from
// the memory of the one before).
func TestAReusedPidFindsNoViewOfTheProcessBefore(t *testing.T) {
	saved := identities
	identities = func() bool { return false }
	defer func() { identities = saved }()
	var ts tasks
	defer ts.close()
	first := exec.Command("sleep", "60")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pid := first.Process.Pid
	ip := mappings(t, pid)[0][0]
	_, c, errno := ts.read(pid, ip, false)
	if errno != 0 {
		t.Fatalf("read: %v", errno)
	}
	ts.commit(&c)
	c.end()
	first.Process.Kill()
	first.Wait()
	var next *exec.Cmd
	for try := 0; try < 50 && next == nil; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(fmt.Sprint(pid-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid (ns_last_pid, root): %v", err)
		}
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			next = cmd
			break
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	if next == nil {
		t.Skip("another process took the pid every time")
	}
	defer next.Wait()
	defer next.Process.Kill()
	_, c, errno = ts.read(pid, mappings(t, pid)[0][0], false)
	defer c.end()
	if errno != 0 {
		t.Fatalf("read: %v", errno)
	}
	if ts.commit(&c) {
		t.Fatal("a process given an exited one's pid was shown an exec, from the memory of the one before")
	}
}
