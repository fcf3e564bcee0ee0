package intercept

import (
	"os"
	"os/exec"
	"reflect"
	"testing"
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
