package intercept

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keyctl"
)

// A WatchPipe is a notification pipe the daemon made for an intercepted
// program's pipe2(O_NOTIFICATION_PIPE): an ordinary pipe in packet mode,
// whose read end the program holds and whose write end the daemon keeps,
// writing each notification as one packet in the kernel's record layout
// ([keyctl.Notification.AppendRecord]). It behaves as the kernel's watch
// queue does: nothing is posted until its size is set
// (IOC_WATCH_QUEUE_SET_SIZE), which bounds how many records wait unread;
// a filter (IOC_WATCH_QUEUE_SET_FILTER) passes only the events it names;
// a record that finds no room is lost, and the reader is told so by a
// loss record after those that had room; and the pipe ends, with every
// watch on it, when the last of its readers closes it.
//
// A packet takes a page of the pipe, where the kernel's queue keeps 32
// records a page: so the pipe itself holds at most pipeSlots records
// (64 KiB of the kernel's memory, what the kernel's queue of 512
// records takes), and those that wait for room in it queue in the
// daemon (a few bytes each), up to the queue's size in all.
type WatchPipe struct {
	w   int    // the daemon's end: write-only, non-blocking, packet mode
	ino uint64 // the pipe's inode and device, by which a caller's
	dev uint64 // descriptor names it

	mu      sync.Mutex
	notes   int          // the queue's size in records; 0 until set
	slots   int          // how many records the pipe itself holds
	filter  *watchFilter // nil: every event
	rawRule []byte       // the filter as set (its header and rules), for State
	// waitingRecs are the records waiting for room in the pipe, in
	// order, loss records among them; queued counts those that are not
	// loss records, which with the pipe's own are at most notes.
	waitingRecs []PendingRecord
	queued      int
	waiting     bool // the poller waits for room in the pipe
	gone        bool
	onGone      []func()
	give        func() // gives back the descriptor's place in its budget
	rec         [keyctl.RecordSize]byte
}

// PendingRecord is a record waiting for room in a notification pipe: a
// notification, or the mark that records were lost.
type PendingRecord struct {
	N    keyctl.Notification `json:"n"`
	Loss bool                `json:"loss,omitempty"`
}

// pipeSlots is how many records a notification pipe itself holds.
const pipeSlots = 16

// Post writes n into the pipe, if its size is set, its filter passes it
// and there is room; it never blocks. A removal record passes every
// filter, as the kernel's does.
func (p *WatchPipe) Post(n keyctl.Notification) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone || p.notes == 0 {
		return
	}
	if n.Kind != keyctl.NotifyRemoved && !p.filter.pass(n) {
		return
	}
	if len(p.waitingRecs) == 0 && p.writeLocked(PendingRecord{N: n}) {
		return
	}
	// The pipe is full, or records wait before this one.
	if p.queued < p.notes-p.slots {
		p.waitingRecs = append(p.waitingRecs, PendingRecord{N: n})
		p.queued++
	} else if k := len(p.waitingRecs); k == 0 || !p.waitingRecs[k-1].Loss {
		// Lost: the reader is told after the records that had room.
		p.waitingRecs = append(p.waitingRecs, PendingRecord{Loss: true})
	}
	p.waitLocked(true)
}

// writeLocked writes one record into the pipe and reports whether it
// went in (false: the pipe is full, or every reader has gone, which the
// poller sees and ends the pipe).
func (p *WatchPipe) writeLocked(r PendingRecord) bool {
	rec := p.rec[:0]
	if r.Loss {
		rec = keyctl.AppendLossRecord(rec)
	} else {
		rec = r.N.AppendRecord(rec)
	}
	for {
		_, err := unix.Write(p.w, rec)
		if err == unix.EINTR {
			continue
		}
		return err == nil
	}
}

// waitLocked asks the poller to watch for room in the pipe, or stops it.
func (p *WatchPipe) waitLocked(on bool) {
	if p.waiting == on {
		return
	}
	var ev uint32
	if on {
		ev = unix.EPOLLOUT
	}
	if unix.EpollCtl(pipes.ep, unix.EPOLL_CTL_MOD, p.w, &unix.EpollEvent{Events: ev, Fd: int32(p.w)}) == nil {
		p.waiting = on
	}
}

// roomAgain is the poller's: the pipe has room for the records waiting.
func (p *WatchPipe) roomAgain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	n := 0
	for _, r := range p.waitingRecs {
		if !p.writeLocked(r) {
			break
		}
		if !r.Loss {
			p.queued--
		}
		n++
	}
	clear(p.waitingRecs[:n])
	p.waitingRecs = p.waitingRecs[n:]
	if len(p.waitingRecs) == 0 {
		p.waitingRecs = nil
		p.waitLocked(false)
	}
}

// OnGone has fn called once the pipe has ended (its readers have all
// closed it, or [WatchPipe.Close] was called); at once if it has.
func (p *WatchPipe) OnGone(fn func()) {
	p.mu.Lock()
	if !p.gone {
		p.onGone = append(p.onGone, fn)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	fn()
}

// Close ends the pipe: its readers see the end of the file once they
// have read what it holds.
func (p *WatchPipe) Close() {
	p.mu.Lock()
	if p.gone {
		p.mu.Unlock()
		return
	}
	p.gone = true
	fns := p.onGone
	p.onGone = nil
	pipes.drop(p)
	unix.Close(p.w)
	p.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	if p.give != nil {
		p.give()
	}
}

// watchFilter is a watch queue's filter as the kernel keeps it: the
// rules of known types, each passing events of its type whose subtype
// is in its set (the first 32 subtypes) and whose info word matches.
type watchFilter struct {
	types uint32 // the types some rule names
	rules []filterRule
}

type filterRule struct {
	typ, subtypes, info, mask uint32
}

// pass reports whether f lets n through; a nil filter lets all through.
func (f *watchFilter) pass(n keyctl.Notification) bool {
	if f == nil {
		return true
	}
	const typ = keyctl.WatchTypeKeyNotify
	if f.types&(1<<typ) == 0 {
		return false
	}
	sub := uint32(n.Kind)
	info := uint32(keyctl.RecordSize) | uint32(n.WatchID)<<8
	for _, r := range f.rules {
		if r.typ == typ && sub < 32 && r.subtypes&(1<<sub) != 0 && info&r.mask == r.info {
			return true
		}
	}
	return false // a filter rejects what no rule passes
}

// The layout of struct watch_notification_filter: a count, a reserved
// word, and the rules (watch_notification_type_filter: type, info
// filter, info mask, eight words of subtype bits).
const (
	filterHeader   = 8
	filterRuleSize = 44
	maxFilters     = 16
)

// filterLen returns how many bytes the filter whose header is hdr spans,
// or the kernel's EINVAL for a header it refuses.
func filterLen(hdr []byte) (int, syscall.Errno) {
	nr, reserved := binary.LittleEndian.Uint32(hdr), binary.LittleEndian.Uint32(hdr[4:])
	if nr == 0 || nr > maxFilters || reserved != 0 {
		return 0, unix.EINVAL
	}
	return filterHeader + int(nr)*filterRuleSize, 0
}

// parseFilter decodes a watch_notification_filter (its header and
// rules, as filterLen measured them) as watch_queue_set_filter does:
// EINVAL for a rule whose info filter has bits outside its mask or whose
// mask covers the length, and rules of unknown types ignored.
func parseFilter(b []byte) (*watchFilter, syscall.Errno) {
	if len(b) < filterHeader {
		return nil, unix.EINVAL
	}
	n, errno := filterLen(b)
	if errno != 0 {
		return nil, errno
	}
	if len(b) < n {
		return nil, unix.EFAULT
	}
	f := &watchFilter{}
	for i := filterHeader; i < n; i += filterRuleSize {
		r := filterRule{typ: binary.LittleEndian.Uint32(b[i:]), info: binary.LittleEndian.Uint32(b[i+4:]), mask: binary.LittleEndian.Uint32(b[i+8:]), subtypes: binary.LittleEndian.Uint32(b[i+12:])}
		if r.info&^r.mask != 0 || r.mask&keyctl.WatchInfoLength != 0 {
			return nil, unix.EINVAL
		}
		if r.typ >= keyctl.WatchTypeCount {
			continue
		}
		f.rules = append(f.rules, r)
		f.types |= 1 << r.typ
	}
	return f, 0
}

// setFilter replaces the pipe's filter (nil removes it); raw is its
// watch_notification_filter.
func (p *WatchPipe) setFilter(f *watchFilter, raw []byte) {
	p.mu.Lock()
	p.filter, p.rawRule = f, bytes.Clone(raw)
	if f == nil {
		p.rawRule = nil
	}
	p.mu.Unlock()
}

// PipeState is what a daemon hands over of a notification pipe, beside
// its write end: its queue's size (0 if not set), its filter (the
// watch_notification_filter the program set, if any), and the records
// waiting for room in the pipe.
type PipeState struct {
	Notes   int             `json:"notes,omitempty"`
	Filter  []byte          `json:"filter,omitempty"`
	Pending []PendingRecord `json:"pending,omitempty"`
}

// State returns the pipe's [PipeState] and its write end, which stays the
// pipe's (the daemon handing over sends a copy).
func (p *WatchPipe) State() (PipeState, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PipeState{Notes: p.notes, Filter: bytes.Clone(p.rawRule), Pending: slices.Clone(p.waitingRecs)}, p.w
}

// AdoptWatchPipe makes a notification pipe again from the write end
// (which it takes) and the state a daemon handed over of one
// ([WatchPipe.State]); give, if not nil, is called once it has ended.
func AdoptWatchPipe(w int, st PipeState, give func()) (*WatchPipe, error) {
	var stat unix.Stat_t
	if err := unix.Fstat(w, &stat); err != nil || stat.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(w)
		return nil, fmt.Errorf("intercept: a notification pipe handed over is no pipe")
	}
	unix.SetNonblock(w, true)
	unix.CloseOnExec(w)
	if st.Notes < 0 || st.Notes > maxNotes || len(st.Pending) > 2*maxNotes {
		unix.Close(w)
		return nil, fmt.Errorf("intercept: a notification pipe handed over holds more than a queue may")
	}
	p := &WatchPipe{w: w, ino: stat.Ino, dev: stat.Dev, notes: st.Notes, slots: pipeSlotsOf(w), give: give}
	if len(st.Filter) > 0 {
		f, errno := parseFilter(st.Filter)
		if errno != 0 {
			unix.Close(w)
			return nil, fmt.Errorf("intercept: a notification pipe's filter handed over: %w", errno)
		}
		p.filter, p.rawRule = f, bytes.Clone(st.Filter)
	}
	if err := pipes.add(p); err != nil {
		unix.Close(w)
		return nil, err
	}
	if len(st.Pending) > 0 {
		p.mu.Lock()
		for _, r := range st.Pending {
			p.waitingRecs = append(p.waitingRecs, r)
			if !r.Loss {
				p.queued++
			}
		}
		p.waitLocked(true)
		p.mu.Unlock()
	}
	return p, nil
}

// The kernel's bounds on a watch queue's size, in notes, and how many
// of its 128-byte notes a page holds.
const (
	maxNotes     = 512
	notesPerPage = 4096 / 128
)

// setSize sizes the pipe's queue for n records, as watch_queue_set_size
// sizes a watch queue: once only (EBUSY after), 1 to 512 (EINVAL),
// rounded up to a page of the kernel's notes (32).
func (p *WatchPipe) setSize(n uint32) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.notes != 0 {
		return unix.EBUSY
	}
	if n < 1 || n > maxNotes {
		return unix.EINVAL
	}
	p.notes = (int(n) + notesPerPage - 1) / notesPerPage * notesPerPage
	return 0
}

// pipeSlotsOf sets the pipe of write end w to hold pipeSlots records,
// and returns how many it holds: fewer where the daemon's user is over
// its pipes' soft bound (/proc/sys/fs/pipe-user-pages-soft), which
// leaves it two pages a pipe.
func pipeSlotsOf(w int) int {
	page := os.Getpagesize()
	unix.FcntlInt(uintptr(w), unix.F_SETPIPE_SZ, pipeSlots*page)
	size, err := unix.FcntlInt(uintptr(w), unix.F_GETPIPE_SZ, 0)
	if err != nil || size < page {
		return 1
	}
	return min(size/page, pipeSlots)
}

// pipes is every watch pipe of this process, by inode, and the poller
// that ends a pipe whose readers have all gone (its write end reports
// EPOLLERR) and writes an owed loss record once there is room: one
// goroutine for all of them, running while there are any.
var pipes = pipeSet{ep: -1, wake: -1}

type pipeSet struct {
	mu      sync.Mutex
	ep      int // epoll, made at the first pipe and kept
	wake    int // an eventfd that tells the poller to look again
	byIno   map[uint64]*WatchPipe
	byFD    map[int32]*WatchPipe
	running bool
}

// newWatchPipe makes a pipe, registered; it returns the read end (with
// O_NONBLOCK if nonblock), the caller's. give is called once the pipe has
// ended.
func newWatchPipe(nonblock bool, give func()) (p *WatchPipe, r int, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_DIRECT|unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, -1, err
	}
	r, w := fds[0], fds[1]
	fail := func(err error) (*WatchPipe, int, error) {
		unix.Close(r)
		unix.Close(w)
		return nil, -1, err
	}
	if !nonblock {
		if _, err := unix.FcntlInt(uintptr(r), unix.F_SETFL, 0); err != nil {
			return fail(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(w, &st); err != nil {
		return fail(err)
	}
	p = &WatchPipe{w: w, ino: st.Ino, dev: st.Dev, slots: pipeSlotsOf(w), give: give}
	if err := pipes.add(p); err != nil {
		return fail(err)
	}
	return p, r, nil
}

// add registers p, starting the poller if it is not running.
func (ps *pipeSet) add(p *WatchPipe) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.init(); err != nil {
		return err
	}
	// No events asked for: EPOLLERR (every reader gone) and EPOLLHUP
	// come unasked.
	if err := unix.EpollCtl(ps.ep, unix.EPOLL_CTL_ADD, p.w, &unix.EpollEvent{Fd: int32(p.w)}); err != nil {
		return err
	}
	ps.byIno[p.ino] = p
	ps.byFD[int32(p.w)] = p
	if !ps.running {
		ps.running = true
		go ps.poll()
	}
	return nil
}

// drop unregisters p (whose lock its caller holds), before its
// descriptor is closed.
func (ps *pipeSet) drop(p *WatchPipe) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byFD[int32(p.w)] != p {
		return
	}
	delete(ps.byFD, int32(p.w))
	if ps.byIno[p.ino] == p {
		delete(ps.byIno, p.ino)
	}
	unix.EpollCtl(ps.ep, unix.EPOLL_CTL_DEL, p.w, nil)
	if len(ps.byFD) == 0 && ps.running {
		var one = [8]byte{1}
		unix.Write(ps.wake, one[:])
	}
}

// WatchPipes returns every notification pipe of this process that has
// not ended: what a daemon handing over sends.
func WatchPipes() []*WatchPipe {
	pipes.mu.Lock()
	defer pipes.mu.Unlock()
	ps := make([]*WatchPipe, 0, len(pipes.byFD))
	for _, p := range pipes.byFD {
		ps = append(ps, p)
	}
	return ps
}

// lookup returns the pipe whose inode is ino, nil if none.
func (ps *pipeSet) lookup(ino uint64) *WatchPipe {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.byIno[ino]
}

// poll is the poller: it returns once no pipe is left.
func (ps *pipeSet) poll() {
	events := make([]unix.EpollEvent, 16)
	type due struct {
		p   *WatchPipe
		end bool
	}
	var todo []due
	for {
		n, err := unix.EpollWait(ps.ep, events, -1)
		if err != nil && err != unix.EINTR {
			n = 0
		}
		todo = todo[:0]
		ps.mu.Lock()
		for _, ev := range events[:max(n, 0)] {
			if ev.Fd == int32(ps.wake) {
				var b [8]byte
				unix.Read(ps.wake, b[:])
				continue
			}
			if p := ps.byFD[ev.Fd]; p != nil {
				todo = append(todo, due{p, ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0})
			}
		}
		if len(ps.byFD) == 0 {
			ps.running = false
			ps.mu.Unlock()
			return
		}
		ps.mu.Unlock()
		for _, d := range todo {
			if d.end {
				d.p.Close()
			} else {
				d.p.roomAgain()
			}
		}
	}
}

// init makes the epoll instance and the wake-up at the first pipe.
func (ps *pipeSet) init() error {
	if ps.ep >= 0 {
		return nil
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return err
	}
	ps.ep, ps.wake = ep, wake
	ps.byIno = make(map[uint64]*WatchPipe)
	ps.byFD = make(map[int32]*WatchPipe)
	return nil
}

// pipeOf returns the daemon's notification pipe that thread tid's
// descriptor fd is, or nil.
func pipeOf(tid int, fd uint64) *WatchPipe {
	if fd > math.MaxInt32 {
		return nil
	}
	var st unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(tid)+"/fd/"+strconv.FormatUint(fd, 10), &st) != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil
	}
	p := pipes.lookup(st.Ino)
	if p == nil || p.dev != st.Dev {
		return nil
	}
	return p
}

// servePipe2 serves pipe2(fds, flags | O_NOTIFICATION_PIPE): the daemon
// makes the pipe, installs its two descriptors in the caller
// (SECCOMP_IOCTL_NOTIF_ADDFD) and writes their numbers to fds.
func (l *Listener) servePipe2(n *notif) (int64, syscall.Errno) {
	flags := uint32(n.args[1])
	if flags&^uint32(unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_DIRECT|oNotificationPipe) != 0 {
		return 0, unix.EINVAL
	}
	addr := n.args[0]
	if !userRange(addr, 8) {
		return 0, unix.EFAULT
	}
	tid := int(n.pid)
	mem := openMem(tid)
	if mem < 0 {
		return 0, unix.EFAULT
	}
	defer unix.Close(mem)
	// The numbers are written last, once the descriptors are in: a
	// buffer the caller cannot have them in is found before.
	var fds [8]byte
	if got, err := unix.Pread(mem, fds[:], int64(addr)); err != nil || got != len(fds) {
		return 0, unix.EFAULT
	}
	if !l.valid(n.id) {
		return 0, unix.ENOENT
	}
	if !l.tasks.takePipe() {
		return 0, unix.EMFILE // the uid's share of the daemon's descriptors
	}
	p, r, err := newWatchPipe(flags&unix.O_NONBLOCK != 0, l.tasks.untake)
	if err != nil {
		l.tasks.untake()
		return 0, errnoOf(err)
	}
	var newFlags uint32
	if flags&unix.O_CLOEXEC != 0 {
		newFlags = unix.O_CLOEXEC
	}
	// Both of the caller's descriptors are the read end: the daemon
	// keeps the only write end, so that nobody else can put a record
	// in, as the kernel refuses every write to a notification pipe. (A
	// path-only descriptor, which could neither read nor write, cannot
	// be installed: SECCOMP_IOCTL_NOTIF_ADDFD refuses O_PATH files.)
	rfd, errno := l.addFD(n.id, r, newFlags)
	if errno != 0 {
		unix.Close(r)
		p.Close()
		return 0, errno
	}
	wfd, errno := l.addFD(n.id, r, newFlags)
	unix.Close(r)
	if errno != 0 {
		// The read end is in the caller, which does not know its number:
		// the pipe ends with the caller.
		return 0, errno
	}
	binary.NativeEndian.PutUint32(fds[0:], uint32(rfd))
	binary.NativeEndian.PutUint32(fds[4:], uint32(wfd))
	if got, err := unix.Pwrite(mem, fds[:], int64(addr)); err != nil || got != len(fds) {
		return 0, unix.EFAULT
	}
	return 0, 0
}

// seccompAddFD is struct seccomp_notif_addfd.
type seccompAddFD struct {
	id         uint64
	flags      uint32
	srcfd      uint32
	newfd      uint32
	newfdFlags uint32
}

// addFD installs a copy of the daemon's descriptor fd in the caller of
// notification id, and returns its number there.
func (l *Listener) addFD(id uint64, fd int, flags uint32) (int, syscall.Errno) {
	a := seccompAddFD{id: id, srcfd: uint32(fd), newfdFlags: flags}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_ADDFD, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// serveIoctl serves the watch queue's ioctls on a notification pipe of
// the daemon's; on any other descriptor the kernel answers them.
func (l *Listener) serveIoctl(n *notif) (int64, syscall.Errno) {
	tid := int(n.pid)
	cmd, arg := uint32(n.args[1]), n.args[2]
	p := pipeOf(tid, uint64(uint32(n.args[0])))
	if p == nil {
		return 0, continueCall
	}
	var f *watchFilter
	var raw []byte
	var errno syscall.Errno
	if cmd == iocWatchQueueFilter && arg != 0 {
		l.mem.pid = tid
		defer l.mem.release()
		f, raw, errno = readFilter(&l.mem, arg)
	}
	if !l.valid(n.id) {
		return 0, unix.ENOENT // the descriptor and memory read may not be the caller's
	}
	switch cmd {
	case iocWatchQueueSize:
		return 0, p.setSize(uint32(arg))
	case iocWatchQueueFilter:
		if errno != 0 {
			return 0, errno
		}
		p.setFilter(f, raw)
		return 0, 0
	}
	return 0, continueCall
}

// readFilter reads the caller's watch_notification_filter at addr, and
// returns it decoded and as read.
func readFilter(m *memory, addr uint64) (*watchFilter, []byte, syscall.Errno) {
	hdr, errno := m.read(addr, filterHeader)
	if errno != 0 {
		return nil, nil, errno
	}
	size, errno := filterLen(hdr)
	if errno != 0 {
		return nil, nil, errno
	}
	b, errno := m.read(addr, size)
	if errno != 0 {
		return nil, nil, errno
	}
	f, errno := parseFilter(b)
	return f, b, errno
}

// errnoOf is err's errno, EIO if it has none.
func errnoOf(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return unix.EIO
}
