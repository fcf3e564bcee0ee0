package intercept

import (
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
)

// tasks is what a listener keeps of its callers between calls: a
// descriptor of each thread's /proc status, from which the thread's
// credentials are read afresh at every call (the kernel checks a task's
// current credentials, and a thread may have changed them with setuid,
// setgroups or capset since its last call), and, for each process, a
// witness of the program image its last call ran in.
//
// Nothing here is found by a number the kernel may give to another task
// alone. A kept status descriptor names one task for as long as it lives
// (a later task with the same id gets another). A process's witness is
// found by the identity of the process, which no other process is ever
// given. And the caller's memory is never reached through anything kept:
// each call opens the calling thread's /proc/<tid>/mem afresh (callMem),
// which the check that the call is still pending proves the caller's.
//
// Only the listener's serving thread uses it.
type tasks struct {
	status map[int]*threadView  // thread id: its /proc/<tid>/status
	procs  map[uint64]*procView // process identity: its witness
	buf    []byte
	// budget, if set, is asked for every descriptor kept, and given it
	// back when it is closed.
	budget Budget
}

// take asks the budget for a descriptor to keep.
func (t *tasks) take() bool { return t.budget == nil || t.budget.Take() }

// takePipe asks the budget for a notification pipe's descriptor.
func (t *tasks) takePipe() bool {
	if pb, ok := t.budget.(PipeBudget); ok {
		return pb.TakePipe()
	}
	return t.take()
}

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

// threadView is a kept descriptor of one thread's /proc status, the
// number (Caller.Task) that names the task it was opened on, and the
// key of that task's process among the listener's procViews: the
// process's identity (pidfs), or, where the kernel gives none, its pid
// marked as such (byPid), whose procView is then pinned by a pidfd of
// the process; 0 where its process is unknown.
type threadView struct {
	fd   int
	task uint64
	proc uint64
}

// byPid is the key of process pid's view where the kernel gives
// processes no identity: above every pidfs inode number.
func byPid(pid int) uint64 { return 1<<63 | uint64(uint32(pid)) }

// procView is what the listener keeps of one process: a descriptor of
// the memory its last call proved pending ran in (its /proc/<tid>/mem,
// opened for that call), which the listener never reads or writes the
// process's data through, only asks whether the next call's instruction
// pointer is mapped there. Where it is not, the memory the process
// calls from now is another: it has run a new program (execve), which
// the kernel gives neither thread nor process keyring.
type procView struct {
	witness int // or -1
	// pin is a pidfd of the process, where its view is found by pid
	// (byPid): while it shows the process alive, the pid is still the
	// process's. -1 where the view is found by the process's identity.
	pin int
	// exec: a call has shown the exec, and no call has yet told the
	// handler.
	exec bool
}

// lastTask numbers the tasks that listeners meet, where the kernel gives
// them no identity of their own (pidfs, Linux 6.9), across listeners,
// so that no two are ever given the same.
var lastTask atomic.Uint64

// maxTasks bounds each table; beyond it the entries of tasks that have
// exited are dropped, and then, if all still live, the table is emptied
// (a thread met again is met as new: it keeps its Task where the kernel
// gives tasks identities, but an exec its process made meanwhile is
// shown only by the process events the daemon may follow).
const maxTasks = 256

// call is what read learned of one call's caller, for the listener to
// act on once the call is proved pending (commit), and to release when
// the call is done (end).
type call struct {
	tv *threadView
	// mem is the calling thread's /proc/<tid>/mem, opened for this call,
	// or -1: the one way results reach the caller.
	mem int
	// exec: the caller's instruction pointer is not mapped in the
	// memory its process's last call ran in.
	exec bool
	// pin is a pidfd of the caller's process, opened for a view found
	// by pid that the call may make, or -1.
	pin int
	// old is the witness this call's memory replaced (commit), or -1:
	// closed with the rest at end, once the caller has its answer.
	old int
}

// noCall is a call with nothing open, for end to close nothing.
var noCall = call{mem: -1, pin: -1, old: -1}

// read returns the credentials and process of thread tid as they are
// now, and what is needed to serve its call: with mem, the thread's
// memory, for a call that writes results (opening it costs a few
// microseconds, which a call that writes none is spared, unless it is
// its process's first, or shows an exec: the process's witness). ip is the
// call's instruction pointer. The caller checks afterwards that the call
// is still pending, which proves tid was the caller's while it was read,
// and then commits the call (commit); either way it ends it (end).
func (t *tasks) read(tid int, ip uint64, mem bool) (st procfs.Status, c call, errno syscall.Errno) {
	c = noCall
	st, tv, ok := t.readStatus(tid)
	if !ok {
		return procfs.Status{}, c, unix.EPERM // gone, or /proc not to be read
	}
	if st.Tgid == 0 {
		st.Tgid = tid
	}
	c.tv = tv
	var pv *procView
	if tv.proc != 0 {
		pv = t.procs[tv.proc]
	}
	if pv != nil && pv.witness >= 0 && !readable(pv.witness, ip) {
		c.exec = true
	}
	if mem || tv.proc != 0 && pv == nil || c.exec {
		// Also at a process's first call, and at the first after an
		// exec: the process's witness (anew).
		c.mem = openMem(tid)
	}
	if tv.proc != 0 && pv == nil && tv.proc == byPid(st.Tgid) {
		// Opened before the call is proved pending, and so the
		// caller's process's.
		c.pin, _ = unix.PidfdOpen(st.Tgid, 0)
		if c.pin < 0 {
			c.pin = -1
		}
	}
	return st, c, 0
}

// commit records what a call proved pending showed of its process (an
// exec), makes the memory it ran in (if it opened it) the process's
// witness, and returns whether the process has exec'd since the handler
// was last told so: the handler is told now. (A witness last set before
// an exec that it did not show, because the old memory lives on and
// maps the new program's code, and that the daemon saw by the
// connector, may show it again at a later call that writes nothing,
// whose instruction pointer it does not map: the new program's @t and @p
// are then dropped once more. Only a call that writes results sets the
// witness anew.)
func (t *tasks) commit(c *call) (exec bool) {
	if c.tv == nil || c.tv.proc == 0 {
		return false
	}
	pv := t.procs[c.tv.proc]
	if pv == nil {
		if c.mem < 0 {
			return false
		}
		if len(t.procs) >= maxTasks {
			t.sweepProcs()
		}
		byPidView := c.tv.proc&(1<<63) != 0
		if byPidView && c.pin < 0 || !t.take() {
			return false
		}
		if byPidView && !t.take() {
			t.untake()
			return false
		}
		pv = &procView{witness: -1, pin: -1}
		if byPidView {
			pv.pin, c.pin = c.pin, -1
		}
		if t.procs == nil {
			t.procs = make(map[uint64]*procView)
		}
		t.procs[c.tv.proc] = pv
	}
	if c.exec {
		pv.exec = true
	}
	if c.mem >= 0 {
		// The old witness's place in the budget goes to the new one; it
		// is closed at end.
		c.old, pv.witness, c.mem = pv.witness, c.mem, -1
	}
	exec, pv.exec = pv.exec, false
	return exec
}

// end closes what a call opened and did not keep, and the witness it
// replaced. The listener calls it once it has answered: nothing it
// closes is the caller's to wait for.
func (c *call) end() {
	for _, fd := range []*int{&c.mem, &c.pin, &c.old} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// readStatus reads thread tid's status through its kept descriptor,
// opening one for a thread met for the first time or whose kept one
// named a task that has exited, and returns the view it read through.
func (t *tasks) readStatus(tid int) (procfs.Status, *threadView, bool) {
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
			var ok bool
			if v, ok = t.open(tid); !ok {
				t.untake()
				return procfs.Status{}, nil, false
			}
			if t.status == nil {
				t.status = make(map[int]*threadView)
			}
			t.status[tid] = v
		}
		n, err := t.pread(v.fd)
		if err != nil {
			t.give(v.fd)
			delete(t.status, tid)
			if kept {
				continue // an earlier task with this id: open the caller's
			}
			return procfs.Status{}, nil, false
		}
		st, ok := procfs.ParseStatus(t.buf[:n])
		if ok && !kept && v.proc == 0 {
			if st.Tgid == 0 {
				st.Tgid = tid
			}
			if identities() {
				t.identify(v, tid, st.Tgid)
			} else {
				t.byPid(v, st.Tgid)
			}
		}
		return st, v, ok
	}
	return procfs.Status{}, nil, false
}

// open opens thread tid's status, as a view with a number of its own:
// the task's identity where the kernel gives one (identify), else one
// never given before.
func (t *tasks) open(tid int) (*threadView, bool) {
	fd, err := procfs.Open("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return nil, false
	}
	return &threadView{fd: fd, task: lastTask.Add(1)}, true
}

// identify gives the view of thread tid, of process tgid, just opened
// and read, the identities the kernel gives the thread and its process
// (pidfs: the inode number of a pidfd, one per task, never reused while
// the system runs). Pidfds are opened by number, so the view's own
// descriptor proves them the view's task's: read again after they are
// opened, it shows the thread still there, and so the thread's id, and
// its process's, still its own.
func (t *tasks) identify(v *threadView, tid, tgid int) {
	tfd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
	if err != nil {
		return
	}
	defer unix.Close(tfd)
	pfd := tfd
	if tgid != tid {
		if pfd, err = unix.PidfdOpen(tgid, 0); err != nil {
			return
		}
		defer unix.Close(pfd)
	}
	if _, err := t.pread(v.fd); err != nil {
		return
	}
	task, proc := inode(tfd), inode(pfd)
	if task == 0 || proc == 0 {
		return
	}
	v.task, v.proc = task, proc
}

// byPid gives the view just opened of a thread of process tgid, where
// the kernel gives processes no identity, the key of its process's view
// by pid, after dropping a view kept under that key for a process that
// has exited since (whose pid tgid now names another): the thread is
// alive, so tgid is its own process's.
func (t *tasks) byPid(v *threadView, tgid int) {
	v.proc = byPid(tgid)
	pv := t.procs[v.proc]
	if pv == nil {
		return
	}
	fds := []unix.PollFd{{Fd: int32(pv.pin), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err == nil && n == 0 {
		return // the process the view was made for lives, and has tgid
	}
	t.closeProc(pv)
	delete(t.procs, v.proc)
}

// inode is a pidfd's inode number, or 0.
func inode(pidfd int) uint64 {
	var st unix.Stat_t
	if unix.Fstat(pidfd, &st) != nil {
		return 0
	}
	return st.Ino
}

// identities reports whether pidfds are pidfs's (Linux 6.9), whose inode
// numbers are identities of tasks, and whether a thread's may be opened
// (PIDFD_THREAD, also 6.9). Tests set it to try the way without.
var identities = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(unix.Gettid(), unix.PIDFD_THREAD)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	return unix.Fstatfs(fd, &fs) == nil && fs.Type == unix.PID_FS_MAGIC && inode(fd) != 0
})

// readStatusOnce reads thread tid's status without keeping a descriptor
// (the budget has none to give). Without a kept descriptor, the task
// read has no identity that later calls could share (its task and
// process are unknown to them): its number is its own.
func (t *tasks) readStatusOnce(tid int) (procfs.Status, *threadView, bool) {
	st, ok := procfs.ReadStatus(tid)
	return st, &threadView{fd: -1, task: lastTask.Add(1)}, ok
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

// sweepProcs drops the witnesses of processes no kept thread belongs to
// any more, or all of them if every one has one.
func (t *tasks) sweepProcs() {
	live := make(map[uint64]bool, len(t.status))
	for _, v := range t.status {
		live[v.proc] = true
	}
	for id, pv := range t.procs {
		if !live[id] {
			t.closeProc(pv)
			delete(t.procs, id)
		}
	}
	if len(t.procs) >= maxTasks {
		for id, pv := range t.procs {
			t.closeProc(pv)
			delete(t.procs, id)
		}
	}
}

// close releases every kept descriptor.
func (t *tasks) close() {
	for tid, v := range t.status {
		t.give(v.fd)
		delete(t.status, tid)
	}
	for id, pv := range t.procs {
		t.closeProc(pv)
		delete(t.procs, id)
	}
}

// closeProc closes a process's witness, if it has one, and returns its
// place.
func (t *tasks) closeProc(pv *procView) {
	if pv.witness >= 0 {
		unix.Close(pv.witness)
		pv.witness = -1
	}
	t.untake()
	if pv.pin >= 0 {
		t.give(pv.pin)
		pv.pin = -1
	}
}

// openMem opens thread tid's memory, for reading and writing, or returns
// -1.
func openMem(tid int) int {
	fd, err := procfs.OpenMem(tid)
	if err != nil {
		return -1
	}
	return fd
}

// readable reports whether one byte at addr reads through mem.
func readable(mem int, addr uint64) bool {
	var b [1]byte
	n, err := unix.Pread(mem, b[:], int64(addr))
	return err == nil && n == 1
}
