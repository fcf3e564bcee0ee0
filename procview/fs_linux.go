package procview

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

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

// Server is the files mounted in a directory ([Mount]).
type Server struct {
	srv *fuse.Server
	dir string
	// ino is the mount's root's inode number, drawn at random: a later
	// Mount at dir (a new daemon's) detaches this one, and Close must
	// then leave dir's alone. (The device number is no identity: a
	// detached mount's is free for the next.)
	ino  uint64
	once sync.Once
	err  error
}

// Mount mounts the files in dir (which must exist) and serves them
// until Close. It needs root (or CAP_SYS_ADMIN) and /dev/fuse; the
// mount lets every user read (allow_other), for containers' processes
// are other users.
func Mount(dir string, cfg Config) (*Server, error) {
	detachStale(dir)
	v := newView(cfg)
	root := &dirNode{build: v.tree}
	ino := rand.Uint64() | 1<<63
	// The names and attributes never change (only what an open reads
	// does): the kernel may keep them, and a path costs no lookup.
	forever := time.Hour
	srv, err := fs.Mount(dir, root, &fs.Options{
		RootStableAttr: &fs.StableAttr{Ino: ino},
		EntryTimeout:   &forever,
		AttrTimeout:    &forever,
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMount:       true,
			DirectMountStrict: os.Geteuid() == 0,
			FsName:            "ukeys",
			Name:              "ukeys",
			DisableXAttrs:     true,
		},
	})
	if err != nil {
		return nil, err
	}
	return &Server{srv: srv, dir: dir, ino: ino}, nil
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

// Dir is the directory the files are mounted in.
func (s *Server) Dir() string { return s.dir }

// Close unmounts the files (lazily, where a reader holds one open or a
// container's bind mount holds the mount: those then read ENOTCONN) and
// waits until they are no longer served. Files another Mount has
// detached since (a new daemon's, at a hand-over) are left as they are:
// dir is the new one's, and these end with the process.
func (s *Server) Close() error {
	s.once.Do(func() {
		var st syscall.Stat_t
		if err := syscall.Stat(s.dir, &st); err != nil || st.Ino != s.ino {
			return
		}
		if s.err = s.srv.Unmount(); s.err != nil {
			// Busy: detached now, gone when the last user lets go.
			if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err == nil {
				s.err = nil
			}
		}
		s.srv.Wait()
	})
	return s.err
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

// tree adds the files under root.
func (v *view) tree(ctx context.Context, root *fs.Inode) {
	file := func(parent *fs.Inode, name string, n fs.InodeEmbedder) {
		parent.AddChild(name, parent.NewPersistentInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	dir := func(parent *fs.Inode, name string) *fs.Inode {
		d := parent.NewPersistentInode(ctx, &dirNode{}, fs.StableAttr{Mode: syscall.S_IFDIR})
		parent.AddChild(name, d, false)
		return d
	}
	file(root, "keys", &fileNode{v: v, render: func(ns Namespace, r reader) (string, error) {
		return ns.ProcKeys(r.cred, r.tid)
	}})
	file(root, "key-users", &fileNode{v: v, render: func(ns Namespace, _ reader) (string, error) {
		return ns.Keys.ProcKeyUsers(), nil
	}})
	sysctls := dir(dir(dir(root, "sys"), "kernel"), "keys")
	for _, name := range Sysctls {
		file(sysctls, name, &fileNode{v: v, sysctl: name, render: func(ns Namespace, _ reader) (string, error) {
			s, _ := SysctlText(ns.Keys.Tunables(), name)
			return s, nil
		}})
	}
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

// dirNode is a directory; the root's build adds the files.
type dirNode struct {
	fs.Inode
	build func(context.Context, *fs.Inode)
}

var _ = (fs.NodeOnAdder)((*dirNode)(nil))
var _ = (fs.NodeGetattrer)((*dirNode)(nil))

func (d *dirNode) OnAdd(ctx context.Context) {
	if d.build != nil {
		d.build(ctx, &d.Inode)
	}
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o555
	return 0
}

// fileNode is one file: its content, rendered for each opener.
type fileNode struct {
	fs.Inode
	v      *view
	render func(Namespace, reader) (string, error)
	// sysctl is the tunable a sysctl file shows; "" for the others.
	sysctl string
}

var _ = (fs.NodeOpener)((*fileNode)(nil))
var _ = (fs.NodeGetattrer)((*fileNode)(nil))
var _ = (fs.NodeSetattrer)((*fileNode)(nil))

func (f *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	// As the kernel's: size 0, root's, writable by root where a sysctl.
	out.Mode = syscall.S_IFREG | 0o444
	if f.sysctl != "" {
		out.Mode = syscall.S_IFREG | 0o644
	}
	out.Nlink = 1
	return 0
}

// Setattr takes the truncation of a sysctl opened for writing (a
// shell's `echo N >`), which changes nothing, as the kernel's does. The
// kernel sends it without the file's handle; the open it follows has
// checked the writer.
func (f *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); f.sysctl == "" || !ok || size != 0 || in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_FH|fuse.FATTR_MTIME|fuse.FATTR_CTIME|fuse.FATTR_MTIME_NOW|fuse.FATTR_LOCKOWNER) != 0 {
		return syscall.EACCES
	}
	return f.Getattr(ctx, fh, out)
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil, 0, syscall.EIO
	}
	ns, r, errno := f.v.resolve(int(c.Pid))
	if errno != 0 {
		return nil, 0, errno
	}
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if write && (f.sysctl == "" || r.cred.UID != 0) {
		// Only a sysctl is writable, and only by the namespace's root.
		return nil, 0, syscall.EACCES
	}
	h := &handle{ns: ns, sysctl: f.sysctl, write: write}
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		s, err := f.render(ns, r)
		if err != nil {
			return nil, 0, errnoOf(err)
		}
		h.data = []byte(s)
	}
	// Direct I/O: every open reads its own view, never the page cache.
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// errnoOf is err's errno, EIO for one that has none.
func errnoOf(err error) syscall.Errno {
	if e, ok := err.(keys.Errno); ok {
		return syscall.Errno(e)
	}
	return syscall.EIO
}

// handle is an open file: the view made when it was opened.
type handle struct {
	ns     Namespace
	data   []byte
	sysctl string
	write  bool
}

var _ = (fs.FileReader)((*handle)(nil))
var _ = (fs.FileWriter)((*handle)(nil))

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}

// Write sets the sysctl from a write at the file's start; one past it
// is taken and ignored, as the kernel's sysctl_writes_strict does.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !h.write || h.sysctl == "" {
		return 0, syscall.EBADF
	}
	if off > 0 {
		return uint32(len(data)), 0
	}
	v, err := ParseInt(data)
	if err != nil {
		return 0, syscall.EINVAL
	}
	if err := SetSysctl(h.ns.Keys, h.sysctl, v); err != nil {
		return 0, errnoOf(err)
	}
	return uint32(len(data)), 0
}
