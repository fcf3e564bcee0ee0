package procview

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
)

// Config says where the files find a reader's key namespace.
type Config struct {
	// Lookup returns the key namespace whose member process pid (in the
	// daemon's pid namespace) is, or false for none
	// ([github.com/ukeys/ukeys/agent.Agent.NamespaceOf]). The process is pinned while it runs.
	Lookup func(pid int) (Namespace, bool)
	// Host, if set, is what a host process (in the daemon's own pid and
	// mount namespaces) that is in no key namespace sees: the daemon's
	// own store. Without it, such a reader gets ENOENT too.
	Host *Namespace
	// Logger receives a line for each reader refused; none if nil.
	Logger *slog.Logger
}

// Server is the files mounted in a directory ([Mount]), or taken over
// from the daemon before this one ([TakeOver]).
//
// It reads the FUSE connection's requests itself and has go-fuse's
// [fuse.ProtocolServer] decode and answer each, rather than running
// go-fuse's own loop, so that it can stop reading at a hand-over
// between two requests, with every request it read answered (HandOver):
// the connection, the mount and the containers' bind mounts of it then
// pass to the next daemon unchanged, their requests waiting in the
// kernel's queue meanwhile. The tree is fixed ([tree]): its node ids
// are the same in every daemon, and an open file's handle goes over
// with what it read.
type Server struct {
	dir string
	// ino is the mount's root's inode number, drawn at random when it
	// is mounted and handed over with it: a later Mount at dir (a new
	// daemon's that did not take these files over) detaches this one,
	// and Close must then leave dir's alone. (The device number is no
	// identity: a detached mount's is free for the next.)
	ino uint64
	// fd is /dev/fuse, non-blocking, waited for in an epoll of the
	// Server's own with the eventfd wake: never in Go's poller, whose
	// lock an epoll_ctl of a file on this very mount holds while it
	// waits for this Server to answer its FUSE_POLL.
	fd, ep, wake int
	ps           *fuse.ProtocolServer
	fs           *rawFS
	init         []byte // the kernel's INIT request, for the next daemon's ProtocolServer

	mu      sync.Mutex
	reading bool
	gone    bool // handed over, or closed
	// handing is a hand-over under way (HandOver returned, its done not
	// called yet): the connection's descriptor is being sent, and its
	// outcome decides what a Close meanwhile (closing) does.
	handing, closing bool
	stopping         atomic.Bool    // the read loop is to end before its next read
	reader           chan struct{}  // closes when the read loop ends
	serving          sync.WaitGroup // requests read and not yet answered

	once sync.Once
	err  error
}

// maxWrite is the largest request the kernel sends and what a read
// asks at most (max_read).
const maxWrite = 128 << 10

// bufSize holds a request or an answer: maxWrite and the headers.
const bufSize = maxWrite + 4096

var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// mountOptions are go-fuse's, the same in every daemon: the INIT a
// daemon replays (TakeOver) negotiates what the first one did.
func mountOptions(log *slog.Logger) *fuse.MountOptions {
	return &fuse.MountOptions{
		MaxWrite:           maxWrite,
		FsName:             "ukeys",
		Name:               "ukeys",
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		Logger:             slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Mount mounts the files in dir (which must exist) and serves them
// until Close or a hand-over. It needs root (or CAP_SYS_ADMIN in the
// mount's user namespace) and /dev/fuse; the mount lets every user read
// (allow_other), for containers' processes are other users.
func Mount(dir string, cfg Config) (*Server, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	detachStale(abs)
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d,allow_other",
		fd, st.Mode&syscall.S_IFMT, os.Geteuid(), os.Getegid(), maxWrite)
	if err := unix.Mount("ukeys", abs, "fuse.ukeys", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mounting the /proc files at %s: %w", abs, err)
	}
	s, err := newServer(abs, fd, rand.Uint64()|1<<63, cfg)
	if err == nil {
		// The kernel's first request, sent as it mounted.
		err = s.handshake()
	}
	if err != nil {
		if s != nil {
			s.release()
		}
		unix.Unmount(abs, unix.MNT_DETACH)
		return nil, err
	}
	s.start()
	noPoll(abs)
	return s, nil
}

// noPoll has the kernel learn that the files cannot be polled (go-fuse
// answers FUSE_POLL ENOSYS) before anything else opens one: Go's
// runtime adds every file it opens to its poller, and an epoll_ctl
// that waits for a FUSE_POLL's answer holds its thread's processor,
// which a stop of the world (the collector's) then waits for: the
// daemon, which answers, would stop for ever. The kernel remembers it
// for the connection, across hand-overs.
func noPoll(dir string) {
	fd, err := unix.Open(filepath.Join(dir, pollHackName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	unix.Close(fd)
}

// pollHackName is the file go-fuse's ProtocolServer answers at the
// root for noPoll.
const pollHackName = ".go-fuse-epoll-hack"

// newServer makes the Server of connection fd (taken), not yet reading.
func newServer(dir string, fd int, ino uint64, cfg Config) (*Server, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err == nil {
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
	}
	if err == nil {
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)})
	}
	v := newView(cfg)
	rfs := &rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), v: v, rootIno: ino, handles: map[uint64]*handle{}}
	s := &Server{dir: dir, ino: ino, fd: fd, ep: ep, wake: wake, fs: rfs,
		ps: fuse.NewProtocolServer(rfs, mountOptions(v.cfg.Logger))}
	if err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// release closes the Server's descriptors, once it reads no more.
func (s *Server) release() {
	for _, fd := range []int{s.fd, s.ep, s.wake} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
	s.fd, s.ep, s.wake = -1, -1, -1
}

// read reads one request into b, waiting for one at most until
// deadline (none if zero); it fails os.ErrDeadlineExceeded once stop
// has been asked or the deadline passed, before it reads anything.
func (s *Server) read(b []byte, deadline time.Time) (int, error) {
	var evs [2]unix.EpollEvent
	for {
		if s.stopping.Load() {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := unix.Read(s.fd, b)
		switch err {
		case nil:
			return n, nil
		case unix.EAGAIN, unix.EINTR, unix.ENOENT:
			// Nothing queued, or a request interrupted before it was
			// read.
		default:
			return 0, err
		}
		wait := -1
		if !deadline.IsZero() {
			wait = int(time.Until(deadline) / time.Millisecond)
			if wait <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
		}
		if _, err := unix.EpollWait(s.ep, evs[:], wait); err != nil && err != unix.EINTR {
			return 0, err
		}
	}
}

// handshake answers the kernel's INIT and keeps it.
func (s *Server) handshake() error {
	in := make([]byte, bufSize)
	n, err := s.read(in, time.Now().Add(10*time.Second))
	if err != nil {
		return fmt.Errorf("the FUSE connection's INIT: %w", err)
	}
	if n < 40 || hdrOpcode(in) != opInit {
		return fmt.Errorf("the FUSE connection's first request is %d bytes of opcode %d, not INIT", n, hdrOpcode(in))
	}
	s.init = in[:n:n]
	return s.answer(in[:n])
}

// The FUSE header's fields the loop itself looks at (struct
// fuse_in_header: len, opcode, unique, ...).
const opInit = 26

func hdrOpcode(b []byte) uint32 {
	return uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24
}

// answer has the ProtocolServer answer request in and writes its answer,
// if it has one (FORGET has none); a request it cannot decode is
// answered EIO, so that its caller never waits for ever.
func (s *Server) answer(in []byte) error {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	out := *bp
	n, st := s.ps.HandleRequest([][]byte{in}, [][]byte{out})
	if st != fuse.OK && len(in) >= 16 {
		// struct fuse_out_header: len, error, unique.
		clear(out[:16])
		out[0] = 16
		eio := -int32(syscall.EIO)
		e := uint32(eio)
		out[4], out[5], out[6], out[7] = byte(e), byte(e>>8), byte(e>>16), byte(e>>24)
		copy(out[8:16], in[8:16])
		n = 16
	}
	if n == 0 {
		return nil
	}
	// ENOENT: the request was interrupted and is gone; nothing waits.
	if _, err := unix.Write(s.fd, out[:n]); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// start reads and answers requests until stop.
func (s *Server) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reading || s.gone {
		return
	}
	s.reading = true
	s.stopping.Store(false)
	var b [8]byte
	unix.Read(s.wake, b[:])
	done := make(chan struct{})
	s.reader = done
	go func() {
		defer close(done)
		s.loop()
	}()
}

// loop reads the requests, each answered in a goroutine of its own (an
// open renders a namespace's /proc/keys), until the read's deadline
// passes (stop) or the connection ends (unmounted).
func (s *Server) loop() {
	for {
		bp := bufs.Get().(*[]byte)
		n, err := s.read(*bp, time.Time{})
		if err != nil {
			bufs.Put(bp)
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				return
			case errors.Is(err, syscall.ENODEV):
				// Unmounted (or aborted): nothing more comes.
				return
			}
			s.fs.v.cfg.Logger.Warn("ukeyd: /proc files: reading the FUSE connection", "err", err)
			return
		}
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			defer bufs.Put(bp)
			if err := s.answer((*bp)[:n]); err != nil && !errors.Is(err, syscall.ENODEV) {
				s.fs.v.cfg.Logger.Warn("ukeyd: /proc files: answering the kernel", "err", err)
			}
		}()
	}
}

// stop stops reading, between two requests, and returns once every
// request read is answered: those the kernel queues meanwhile wait there
// for the next reader (this Server's again, or the next daemon's).
func (s *Server) stop() {
	s.mu.Lock()
	reader := s.reader
	was := s.reading
	s.reading = false
	s.mu.Unlock()
	if !was {
		return
	}
	// A read waiting for a request returns; one that has its request
	// already hands it to a goroutine before it looks again.
	s.stopping.Store(true)
	unix.Write(s.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-reader
	s.serving.Wait()
}

// Dir is the directory the files are mounted in.
func (s *Server) Dir() string { return s.dir }

// Close unmounts the files (lazily, where a reader holds one open or a
// container's bind mount holds the mount: those then read ENOTCONN) and
// waits until they are no longer served. Files another Mount has
// detached since (a new daemon's that mounted afresh) are left as they
// are: dir is the new one's. After a hand-over Close does nothing: the
// files are the next daemon's; during one, the hand-over's outcome
// decides (a failed one then unmounts them).
func (s *Server) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		gone, handing := s.gone, s.handing
		s.closing = true
		s.mu.Unlock()
		if !gone && !handing {
			s.err = s.shut()
		}
	})
	return s.err
}

// shut unmounts the files, unless another Mount has put its own at dir
// since, and stops serving them.
func (s *Server) shut() (err error) {
	var st syscall.Stat_t
	if syscall.Stat(s.dir, &st) == nil && st.Ino == s.ino {
		if err = unix.Unmount(s.dir, 0); err != nil {
			// Busy: detached now, gone when the last user lets go.
			if unix.Unmount(s.dir, unix.MNT_DETACH) == nil {
				err = nil
			}
		}
	}
	s.stop()
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	s.release()
	return err
}

// detachStale detaches the files a daemon before this one mounted at
// dir: one that crashed left a mount whose every access fails ENOTCONN
// (on which nothing can be mounted), and one this daemon takes over
// from serves its own until it exits, without unmounting, so that it
// never unmounts this one's.
func detachStale(dir string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options... - fstype source ...
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "fuse.ukeys" || unescape(f[4]) != abs {
			continue
		}
		syscall.Unmount(abs, syscall.MNT_DETACH)
	}
}

// unescape undoes mountinfo's octal escapes of blanks and backslashes.
func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// view answers the files' readers.
type view struct {
	cfg Config
}

func newView(cfg Config) *view {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &view{cfg: cfg}
}

// reader is who opened a file: its process (pid), the thread that
// opened (tid), and its credentials of the moment.
type reader struct {
	pid, tid int
	cred     keys.Cred
}

// resolve returns the key namespace of the thread tid that made a FUSE
// request, and who it is. tid is only a name: the process is pinned by
// a pidfd (process.OpenPID, checked against its start time) before
// anything is read of it, and the answer stands only if the process
// still lives after the namespace is found, so that what was read (its
// credentials, its namespaces) was that process's and not a later one's
// with its pid. (The kernel keeps a reader waiting, unkillable, once its
// request is read, so the pid cannot change hands meanwhile; the pidfd
// makes that a check rather than an assumption.)
func (v *view) resolve(tid int) (Namespace, reader, syscall.Errno) {
	if tid <= 0 {
		// In a pid namespace the daemon cannot see.
		return Namespace{}, reader{}, syscall.ENOENT
	}
	st, ok := procfs.ReadStatus(tid)
	if !ok {
		return Namespace{}, reader{}, syscall.ENOENT
	}
	pid := st.Tgid
	if pid <= 0 {
		pid = tid
	}
	h, ok := process.OpenPID(pid, process.StartTime(pid))
	if !ok {
		return Namespace{}, reader{}, syscall.ENOENT
	}
	defer h.Close()
	// Read again, the process pinned: the thread is still one of it.
	if st, ok = procfs.ReadStatus(tid); !ok || st.Tgid != 0 && st.Tgid != pid {
		return Namespace{}, reader{}, syscall.ENOENT
	}
	ns, ok := v.cfg.Lookup(pid)
	if !ok {
		if v.cfg.Host == nil || !onHost(pid) {
			if !h.Exited() {
				v.cfg.Logger.Debug("ukeyd: /proc files: a reader in no key namespace; ENOENT", "pid", pid)
			}
			return Namespace{}, reader{}, syscall.ENOENT
		}
		ns = *v.cfg.Host
	}
	if h.Exited() {
		return Namespace{}, reader{}, syscall.ENOENT
	}
	// Capabilities play no part in viewing; the credentials are those
	// the kernel checks a key's permission against (fsuid, fsgid).
	cred := keys.Cred{UID: st.UIDs[3], GID: st.GIDs[3], Groups: st.Groups, PID: pid, CapsKnown: true}
	return ns, reader{pid: pid, tid: tid, cred: cred}, 0
}

// onHost reports whether process pid is in the daemon's own pid and
// mount namespaces: a host process, not one of a container (even one
// that shares the host's pids).
func onHost(pid int) bool {
	for _, kind := range []string{"pid", "mnt"} {
		theirs, ok1 := process.NSOf(pid, kind)
		ours, ok2 := process.NSOf(os.Getpid(), kind)
		if !ok1 || !ok2 || theirs != ours {
			return false
		}
	}
	return true
}

// errnoOf is err's errno, EIO for one that has none.
func errnoOf(err error) syscall.Errno {
	if e, ok := err.(keys.Errno); ok {
		return syscall.Errno(e)
	}
	return syscall.EIO
}

// node is one of the files' fixed tree. Its id is the FUSE node id the
// kernel knows it by, and its inode number (but for the root's, [Server]'s
// ino): the same in every daemon, so that the kernel's dentries, the
// containers' bind mounts of them and their open files stay valid
// across a hand-over without a lookup.
type node struct {
	id       uint64
	parent   uint64
	name     string
	dir      bool
	children []uint64
	// sysctl is the tunable a sysctl file shows; "" for the others.
	sysctl string
	render func(Namespace, reader) (string, error)
}

// tree is the files, by node id: the root (FUSE's, 1), keys, key-users,
// sys/kernel/keys and its sysctls in keys.SysctlNames' order. A daemon
// that adds a file adds it at the end, so that every id before keeps
// its meaning.
var tree = func() map[uint64]*node {
	t := map[uint64]*node{}
	add := func(parent uint64, name string, n *node) uint64 {
		n.id, n.parent, n.name = uint64(len(t)+1), parent, name
		t[n.id] = n
		if p := t[parent]; p != nil {
			p.children = append(p.children, n.id)
		}
		return n.id
	}
	root := add(0, "", &node{dir: true})
	add(root, "keys", &node{render: func(ns Namespace, r reader) (string, error) {
		return ns.ProcKeys(r.cred, r.tid)
	}})
	add(root, "key-users", &node{render: func(ns Namespace, _ reader) (string, error) {
		return ns.Keys.ProcKeyUsers(), nil
	}})
	sysctls := add(add(add(root, "sys", &node{dir: true}), "kernel", &node{dir: true}), "keys", &node{dir: true})
	for _, name := range Sysctls {
		add(sysctls, name, &node{sysctl: name, render: func(ns Namespace, _ reader) (string, error) {
			s, _ := SysctlText(ns.Keys.Tunables(), name)
			return s, nil
		}})
	}
	return t
}()

// forever is how long the kernel may keep names and attributes: they
// never change (only what an open reads does), and a path then costs
// no lookup.
const forever = time.Hour

// rawFS answers the kernel's requests on the fixed tree.
type rawFS struct {
	fuse.RawFileSystem
	v       *view
	rootIno uint64

	mu      sync.Mutex
	handles map[uint64]*handle
	nextFH  uint64
}

func (f *rawFS) String() string { return "ukeys" }

func (f *rawFS) attr(n *node, out *fuse.Attr) {
	*out = fuse.Attr{Ino: n.id, Nlink: 1}
	switch {
	case n.dir:
		out.Mode, out.Nlink = syscall.S_IFDIR|0o555, 2
	case n.sysctl != "":
		// As the kernel's: size 0, root's, writable by root.
		out.Mode = syscall.S_IFREG | 0o644
	default:
		out.Mode = syscall.S_IFREG | 0o444
	}
	if n.id == fuse.FUSE_ROOT_ID {
		out.Ino = f.rootIno
	}
}

func (f *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	p := tree[h.NodeId]
	if p == nil {
		return fuse.Status(syscall.ESTALE)
	}
	for _, id := range p.children {
		if n := tree[id]; n.name == name {
			out.NodeId = id
			f.attr(n, &out.Attr)
			out.SetEntryTimeout(forever)
			out.SetAttrTimeout(forever)
			return fuse.OK
		}
	}
	return fuse.ENOENT
}

// Forget has nothing to drop: every node lives as long as the files.
func (f *rawFS) Forget(nodeid, nlookup uint64) {}

func (f *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	n := tree[in.NodeId]
	if n == nil {
		return fuse.Status(syscall.ESTALE)
	}
	f.attr(n, &out.Attr)
	out.SetTimeout(forever)
	return fuse.OK
}

// SetAttr takes the truncation of a sysctl opened for writing (a
// shell's `echo N >`), which changes nothing, as the kernel's does. The
// kernel sends it without the file's handle; the open it follows has
// checked the writer.
func (f *rawFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	n := tree[in.NodeId]
	if n == nil {
		return fuse.Status(syscall.ESTALE)
	}
	if size, ok := in.GetSize(); n.sysctl == "" || !ok || size != 0 || in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_FH|fuse.FATTR_MTIME|fuse.FATTR_CTIME|fuse.FATTR_MTIME_NOW|fuse.FATTR_LOCKOWNER) != 0 {
		return fuse.EACCES
	}
	f.attr(n, &out.Attr)
	out.SetTimeout(forever)
	return fuse.OK
}

func (f *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	n := tree[in.NodeId]
	switch {
	case n == nil:
		return fuse.Status(syscall.ESTALE)
	case n.dir:
		return fuse.Status(syscall.EISDIR)
	}
	ns, r, errno := f.v.resolve(int(in.Pid))
	if errno != 0 {
		return fuse.Status(errno)
	}
	write := in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if write && (n.sysctl == "" || r.cred.UID != 0) {
		// Only a sysctl is writable, and only by the namespace's root.
		return fuse.EACCES
	}
	h := &handle{node: n.id, ns: ns, sysctl: n.sysctl, write: write}
	if in.Flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		s, err := n.render(ns, r)
		if err != nil {
			return fuse.Status(errnoOf(err))
		}
		h.data = []byte(s)
	}
	f.mu.Lock()
	f.nextFH++
	out.Fh = f.nextFH
	f.handles[out.Fh] = h
	f.mu.Unlock()
	// Direct I/O: every open reads its own view, never the page cache.
	out.OpenFlags = fuse.FOPEN_DIRECT_IO
	return fuse.OK
}

func (f *rawFS) handle(fh uint64) *handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handles[fh]
}

func (f *rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h := f.handle(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	if in.Offset >= uint64(len(h.data)) {
		return fuse.ReadResultData(nil), fuse.OK
	}
	end := min(in.Offset+uint64(in.Size), uint64(len(h.data)))
	return fuse.ReadResultData(h.data[in.Offset:end]), fuse.OK
}

// Write sets the sysctl from a write at the file's start; one past it
// is taken and ignored, as the kernel's sysctl_writes_strict does. A
// handle opened before a hand-over has no namespace here (its opener's
// was the old daemon's to check): its writes fail EIO.
func (f *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h := f.handle(in.Fh)
	if h == nil || !h.write || h.sysctl == "" {
		return 0, fuse.EBADF
	}
	if in.Offset > 0 {
		return uint32(len(data)), fuse.OK
	}
	if h.ns.Keys == nil {
		return 0, fuse.EIO
	}
	v, err := ParseInt(data)
	if err != nil {
		return 0, fuse.EINVAL
	}
	if err := SetSysctl(h.ns.Keys, h.sysctl, v); err != nil {
		return 0, fuse.Status(errnoOf(err))
	}
	return uint32(len(data)), fuse.OK
}

func (f *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.OK }

func (f *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	f.mu.Lock()
	delete(f.handles, in.Fh)
	f.mu.Unlock()
}

func (f *rawFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	n := tree[in.NodeId]
	switch {
	case n == nil:
		return fuse.Status(syscall.ESTALE)
	case !n.dir:
		return fuse.ENOTDIR
	}
	return fuse.OK
}

// ReadDir lists ., .. and the children, the nth at offset n+1.
func (f *rawFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	n := tree[in.NodeId]
	if n == nil || !n.dir {
		return fuse.Status(syscall.ESTALE)
	}
	all := []fuse.DirEntry{{Name: ".", Mode: syscall.S_IFDIR, Ino: n.id}, {Name: "..", Mode: syscall.S_IFDIR, Ino: max(n.parent, 1)}}
	for _, id := range n.children {
		c := tree[id]
		var a fuse.Attr
		f.attr(c, &a)
		all = append(all, fuse.DirEntry{Name: c.name, Mode: a.Mode, Ino: id})
	}
	for i := in.Offset; i < uint64(len(all)); i++ {
		e := all[i]
		e.Off = i + 1
		if !out.AddDirEntry(e) {
			break
		}
	}
	return fuse.OK
}

func (f *rawFS) ReleaseDir(in *fuse.ReleaseIn) {}

func (f *rawFS) StatFs(cancel <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	*out = fuse.StatfsOut{}
	out.Bsize, out.NameLen = 4096, 255
	return fuse.OK
}

// handle is an open file: the view made when it was opened.
type handle struct {
	node   uint64
	ns     Namespace
	data   []byte
	sysctl string
	write  bool
}

func closeFD(fd int) { unix.Close(fd) }

// Detach detaches the files mounted at dir, if any: a daemon that does
// not serve the files it was handed (another -proc-dir, or none) lets
// their mount go, as a fresh start's Mount would.
func Detach(dir string) { detachStale(dir) }
