package intercept

import (
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
)

// tasks is what a listener keeps of its callers between calls: a
// descriptor of each thread's /proc status, from which the thread's
// credentials are read afresh at every call (the kernel checks a task's
// current credentials, and a thread may have changed them with setuid,
// setgroups or capset since its last call), and a descriptor of each
// process's memory, which tells that the process has exec'd since its
// last call: a descriptor of /proc/<pid>/mem holds the memory it was
// opened on, and reads nothing once execve has replaced it.
//
// A kept descriptor names one task for as long as it lives (a later
// task with the same id gets another), so a reused id is never mistaken
// for the task before it. Only the listener's serving thread uses it.
type tasks struct {
	status map[int]statusView // thread id: its /proc/<tid>/status
	procs  map[int]*procView  // process id: its memory
	buf    []byte
	// budget, if set, is asked for every descriptor kept, and given it
	// back when it is closed.
	budget Budget
}

// take asks the budget for a descriptor to keep.
func (t *tasks) take() bool { return t.budget == nil || t.budget.Take() }

// untake returns a place take gave, for a descriptor not kept after all.
func (t *tasks) untake() {
	if t.budget != nil {
		t.budget.Give()
	}
}

// give closes a kept descriptor and returns its place.
func (t *tasks) give(fd int) {
	unix.Close(fd)
	t.untake()
}

// statusView is a kept descriptor of one thread's /proc status, and the
// number (Caller.Task) that names the task it was opened on.
type statusView struct {
	fd   int
	task uint64
}

// lastTask numbers the tasks that listeners meet, across listeners, so
// that no two are ever given the same.
var lastTask atomic.Uint64

// procView is the listener's view of one process's memory.
type procView struct {
	mem  int    // /proc/<pid>/mem, or -1 where the daemon may not open it
	addr uint64 // an address its last call showed mapped (the call's instruction pointer)
	// exec: the memory the descriptor was opened on is gone while the
	// process lives, so it has exec'd; cleared once a call has told the
	// handler so.
	exec bool
}

// maxTasks bounds each table; beyond it the entries of tasks that have
// exited are dropped, and then, if all still live, the table is emptied
// (a process met again is met as new: an exec it made meanwhile goes
// unseen).
const maxTasks = 256

// read returns the credentials and process of thread tid as they are now,
// and whether its process has exec'd since the listener last served it.
// ip is an address the call shows mapped in the caller (its instruction
// pointer). The caller checks afterwards that the call is still pending,
// which proves tid was the caller's while it was read. task is the
// number of the task read (Caller.Task).
func (t *tasks) read(tid int, ip uint64) (st procfs.Status, task uint64, exec bool, errno syscall.Errno) {
	st, task, ok := t.readStatus(tid)
	if !ok {
		return procfs.Status{}, 0, false, unix.EPERM // gone, or /proc not to be read
	}
	if st.Tgid == 0 {
		st.Tgid = tid
	}
	pv := t.procs[st.Tgid]
	switch {
	case pv == nil:
		if len(t.procs) >= maxTasks {
			t.sweepProcs()
		}
		pv = &procView{mem: t.openMem(st.Tgid)}
		if t.procs == nil {
			t.procs = make(map[int]*procView)
		}
		t.procs[st.Tgid] = pv
	case pv.mem >= 0 && !readable(pv.mem, ip):
		// The memory it had is gone: execve replaced it (or the process
		// is exiting, and the call will prove no longer pending). Its
		// place in the budget goes to the new descriptor.
		unix.Close(pv.mem)
		if pv.mem = openMem(st.Tgid); pv.mem < 0 {
			t.untake()
		}
		pv.exec = true
	}
	pv.addr = ip
	return st, task, pv.exec, 0
}

// delivered records that the handler has been told of process pid's
// exec.
func (t *tasks) delivered(pid int) {
	if pv := t.procs[pid]; pv != nil {
		pv.exec = false
	}
}

// readStatus reads thread tid's status through its kept descriptor,
// opening one for a thread met for the first time or whose kept one
// named a task that has exited, and returns the number of the task read.
func (t *tasks) readStatus(tid int) (procfs.Status, uint64, bool) {
	if t.buf == nil {
		t.buf = make([]byte, 4096)
	}
	for attempt := 0; attempt < 2; attempt++ {
		v, kept := t.status[tid]
		if !kept {
			if len(t.status) >= maxTasks {
				t.sweepStatus()
			}
			if !t.take() {
				return t.readStatusOnce(tid)
			}
			fd, err := procfs.Open("/proc/" + strconv.Itoa(tid) + "/status")
			if err != nil {
				t.untake()
				return procfs.Status{}, 0, false
			}
			if t.status == nil {
				t.status = make(map[int]statusView)
			}
			v = statusView{fd: fd, task: lastTask.Add(1)}
			t.status[tid] = v
		}
		n, err := t.pread(v.fd)
		if err != nil {
			t.give(v.fd)
			delete(t.status, tid)
			if kept {
				continue // an earlier task with this id: open the caller's
			}
			return procfs.Status{}, 0, false
		}
		st, ok := procfs.ParseStatus(t.buf[:n])
		return st, v.task, ok
	}
	return procfs.Status{}, 0, false
}

// readStatusOnce reads thread tid's status without keeping a descriptor
// (the budget has none to give): the task it reads gets a number of its
// own, which no later call shares.
func (t *tasks) readStatusOnce(tid int) (procfs.Status, uint64, bool) {
	st, ok := procfs.ReadStatus(tid)
	return st, lastTask.Add(1), ok
}

// pread reads the whole of a status file from its start (which makes
// the kernel write it afresh), growing the buffer as needed.
func (t *tasks) pread(fd int) (int, error) {
	for {
		n, err := unix.Pread(fd, t.buf, 0)
		if err != nil {
			return 0, err
		}
		if n < len(t.buf) || len(t.buf) >= 1<<16 {
			return n, nil
		}
		t.buf = make([]byte, 2*len(t.buf))
	}
}

// sweepStatus drops the descriptors of threads that have exited, or all
// of them if none has.
func (t *tasks) sweepStatus() {
	for tid, v := range t.status {
		if _, err := t.pread(v.fd); err != nil {
			t.give(v.fd)
			delete(t.status, tid)
		}
	}
	if len(t.status) >= maxTasks {
		for tid, v := range t.status {
			t.give(v.fd)
			delete(t.status, tid)
		}
	}
}

// sweepProcs drops the views of processes that have exited or exec'd
// (the next call of one that exec'd finds it new), or all of them if
// none has.
func (t *tasks) sweepProcs() {
	for pid, pv := range t.procs {
		if pv.mem < 0 || !readable(pv.mem, pv.addr) {
			t.closeProc(pv)
			delete(t.procs, pid)
		}
	}
	if len(t.procs) >= maxTasks {
		for pid, pv := range t.procs {
			t.closeProc(pv)
			delete(t.procs, pid)
		}
	}
}

// close releases every kept descriptor.
func (t *tasks) close() {
	for tid, v := range t.status {
		t.give(v.fd)
		delete(t.status, tid)
	}
	for pid, pv := range t.procs {
		t.closeProc(pv)
		delete(t.procs, pid)
	}
}

// closeProc closes a process's kept memory, if it has one.
func (t *tasks) closeProc(pv *procView) {
	if pv.mem >= 0 {
		t.give(pv.mem)
		pv.mem = -1
	}
}

// openMem opens process pid's memory to keep, if the budget has room for
// it, or returns -1.
func (t *tasks) openMem(pid int) int {
	if !t.take() {
		return -1
	}
	fd := openMem(pid)
	if fd < 0 {
		t.untake()
	}
	return fd
}

// openMem opens process pid's memory, for reading and writing, or
// returns -1.
func openMem(pid int) int {
	fd, err := procfs.OpenMem(pid)
	if err != nil {
		return -1
	}
	return fd
}

// mem returns the kept descriptor of process pid's memory, which read
// found the memory of the process its caller is in, or -1.
func (t *tasks) mem(pid int) int {
	if pv := t.procs[pid]; pv != nil {
		return pv.mem
	}
	return -1
}

// readable reports whether one byte at addr reads through mem.
func readable(mem int, addr uint64) bool {
	var b [1]byte
	n, err := unix.Pread(mem, b[:], int64(addr))
	return err == nil && n == 1
}
