package main

// keyctl watch_session, watch_add, watch_rm and watch_sync.
//
// keyctl watches keys through a kernel notification pipe that
// watch_session hands to its program as a file descriptor; watch_add and
// watch_rm, run by that program, add and remove watches on that pipe. The
// daemon has no such pipes: a connection's watches report to that
// connection only. So watch_session keeps one connection per watched key
// and hands its program the end of a socket instead, on which watch_add,
// watch_rm and watch_sync send their requests ("add <id>", "rm <id>",
// "sync") and read the errno of the answer. What ends up in the logs is
// what keyctl writes there.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
)

// Watch ids, as keyctl uses them: 1 for the session keyring watch_session
// watches, 2 for watch_add's; 3 is ukeyctl's own, for watch_sync.
const (
	watchIDSession = 1
	watchIDAdded   = 2
	watchIDSync    = 3
)

// monitor is watch_session's side: the watch connections, their
// consumers, and the request socket.
type monitor struct {
	a       *app
	filter  *watchFilter
	logMu   sync.Mutex
	log, gc *os.File

	primary *client.Client
	marker  keyctl.Serial // keyring whose changes mark a sync point

	// markMu orders changes of the marker with new watches of it, so
	// that each connection knows which markers it will see.
	markMu sync.Mutex

	mu       sync.Mutex
	watches  map[keyctl.Serial]*watchConn
	sessions keyctl.Serial
	markers  int // markers posted
	cond     *sync.Cond
	wg       sync.WaitGroup
	ended    chan struct{} // the session keyring's watch went
	endOnce  sync.Once
}

// watchConn is one watch: its connection and how many sync markers its
// consumer has seen.
type watchConn struct {
	cl      *client.Client
	base    int // markers posted before it watched the marker
	markers int // markers seen
}

func (m *monitor) logf(f *os.File, format string, v ...any) {
	m.logMu.Lock()
	fmt.Fprintf(f, format, v...)
	m.logMu.Unlock()
}

func openLog(a *app, name string) *os.File {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		a.fail(name, err)
	}
	return f
}

func (a *app) cmdWatchSession(args []string) {
	var filter watchFilter
	var name *string
	opts, rest, ok := a.getopt(args, "+df:n:")
	if !ok {
		a.eprintf("Unknown option\n")
		a.exit(2)
	}
	for _, o := range opts {
		switch o.c {
		case 'f':
			a.parseFilter(&filter, o.arg)
		case 'n':
			n := o.arg
			name = &n
		}
	}
	if len(rest) < 4 {
		a.format()
	}
	tfd := atoi(rest[2])
	if tfd < 3 || tfd > 9 {
		a.eprintf("The target fd must be between 3 and 9\n")
		a.exit(2)
	}
	m := &monitor{a: a, filter: &filter, watches: make(map[keyctl.Serial]*watchConn), ended: make(chan struct{})}
	m.cond = sync.NewCond(&m.mu)
	m.log = openLog(a, rest[0])
	defer m.log.Close()
	m.gc = openLog(a, rest[1])
	defer m.gc.Close()
	m.primary = a.c()

	session, err := m.primary.JoinSessionKeyring(name)
	if err != nil {
		a.fail("keyctl_join_session_keyring", err)
	}
	if session == 0 {
		session, _ = m.primary.GetKeyringID(keyctl.SessionKeyring, false)
	}
	m.sessions = session
	desc := "_watch_sync"
	if m.marker, err = m.primary.AddKey("keyring", desc, nil, keyctl.ProcessKeyring); err != nil {
		a.fail("ukeyctl: watch_session", err)
	}
	// Whatever happens from here on, the watches and their consumers go
	// before this returns (or exits).
	defer func() {
		m.closeAll()
		m.wg.Wait()
	}()
	if errno := m.add(session, watchIDSession); errno != 0 {
		a.fail("keyctl_watch_key/session", errno)
	}
	a.eprintf("Joined session keyring: %d\n", session)

	prog := rest[3:]
	tok, err := m.primary.SessionToken()
	if err != nil {
		a.fail("ukeyctl: session token", err)
	}
	env := withEnv(withEnv(os.Environ(), client.SessionEnv, tok), "KEYCTL_WATCH_FD", strconv.Itoa(tfd))
	path, argv := prog[0], prog
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			a.fail(path, keyctl.ENOENT)
		}
		path = p
	}

	// The program's end of the request socket becomes its fd tfd.
	fds, err := socketpairCloexec(syscall.AF_UNIX, syscall.SOCK_SEQPACKET)
	if err != nil {
		a.fail("socketpair", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "watch-monitor")
	theirs := os.NewFile(uintptr(fds[1]), "watch-queue")
	defer ours.Close()
	defer theirs.Close()
	m.wg.Add(1)
	go m.serve(ours)

	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: a.stdin, Stdout: a.rawOut, Stderr: a.stderr}
	cmd.ExtraFiles = make([]*os.File, tfd-2)
	cmd.ExtraFiles[tfd-3] = theirs
	a.out.Flush()
	// If the session keyring goes, keyctl's consumer exits and
	// watch_session stops the program.
	code := a.runChild(cmd, prog[0], m.ended)
	theirs.Close()
	ours.Close()
	select {
	case <-m.ended:
	default:
		m.logf(m.log, "Monitoring terminated\n")
		m.logf(m.gc, "Monitoring terminated\n")
	}
	a.exit(code)
}

// add watches key on a connection of its own and starts its consumer,
// returning the errno of a failure (0 on success).
func (m *monitor) add(key keyctl.Serial, watchID int) keyctl.Errno {
	serial, err := m.primary.GetKeyringID(key, false)
	if err == nil {
		m.mu.Lock()
		_, dup := m.watches[serial]
		m.mu.Unlock()
		if dup {
			return keyctl.EBUSY
		}
	}
	cl, err := client.Dial(client.DefaultSocket())
	if err != nil {
		return keyctl.ENOMEM
	}
	if err := cl.WatchKey(key, watchID); err != nil {
		cl.Close()
		return errnoOf(err)
	}
	m.markMu.Lock()
	if err := cl.WatchKey(m.marker, watchIDSync); err != nil {
		m.markMu.Unlock()
		cl.Close()
		return errnoOf(err)
	}
	m.mu.Lock()
	w := &watchConn{cl: cl, base: m.markers}
	m.watches[serial] = w
	m.mu.Unlock()
	m.markMu.Unlock()
	m.wg.Add(1)
	go m.consume(serial, w)
	return 0
}

// consume logs one watch connection's events.
func (m *monitor) consume(serial keyctl.Serial, w *watchConn) {
	defer m.wg.Done()
	for {
		n, err := w.cl.NextNotification()
		if err != nil {
			return
		}
		if n.WatchID == watchIDSync {
			if n.Kind == keyctl.NotifySetAttr {
				m.mu.Lock()
				w.markers++
				m.cond.Broadcast()
				m.mu.Unlock()
			}
			continue
		}
		if !m.filter.pass(n.Kind) {
			continue
		}
		m.logEvent(n)
		if n.Kind == keyctl.NotifyRemoved {
			m.drop(serial, w)
			if n.WatchID == watchIDSession {
				m.endOnce.Do(func() { close(m.ended) })
			}
			return
		}
	}
}

func (m *monitor) logEvent(n keyctl.Notification) {
	id := uint32(n.Key)
	switch n.Kind {
	case keyctl.NotifyInstantiated:
		m.logf(m.log, "%d inst\n", id)
	case keyctl.NotifyUpdated:
		m.logf(m.log, "%d upd\n", id)
	case keyctl.NotifyLinked:
		m.logf(m.log, "%d link %d\n", id, uint32(n.Aux))
	case keyctl.NotifyUnlinked:
		m.logf(m.log, "%d unlk %d\n", id, uint32(n.Aux))
	case keyctl.NotifyCleared:
		m.logf(m.log, "%d clr\n", id)
	case keyctl.NotifyRevoked:
		m.logf(m.log, "%d rev\n", id)
	case keyctl.NotifyInvalidated:
		m.logf(m.log, "%d inv\n", id)
	case keyctl.NotifySetAttr:
		m.logf(m.log, "%d attr\n", id)
	case keyctl.NotifyRemoved:
		m.logf(m.gc, "%d gc\n", id)
	}
}

// drop forgets a watch and closes its connection.
func (m *monitor) drop(serial keyctl.Serial, w *watchConn) {
	m.mu.Lock()
	if m.watches[serial] == w {
		delete(m.watches, serial)
	}
	m.cond.Broadcast()
	m.mu.Unlock()
	w.cl.Close()
	m.poke()
}

// poke changes the marker keyring so that every watch connection gets an
// event. The daemon serves a connection's wait for its next event without
// reading from it, so a connection closed while it waits stays blocked in
// the daemon until an event comes; the poke releases those just closed.
func (m *monitor) poke() error {
	m.markMu.Lock()
	defer m.markMu.Unlock()
	if err := m.primary.SetTimeout(m.marker, 0); err != nil {
		return err
	}
	m.mu.Lock()
	m.markers++
	m.mu.Unlock()
	return nil
}

// remove is watch_rm: the watch goes, with the removal record the kernel
// would queue for it.
func (m *monitor) remove(key keyctl.Serial) keyctl.Errno {
	serial, err := m.primary.GetKeyringID(key, false)
	if err != nil {
		return errnoOf(err)
	}
	m.mu.Lock()
	w := m.watches[serial]
	m.mu.Unlock()
	if w == nil {
		return keyctl.EBADSLT
	}
	id := uint8(watchIDAdded)
	if serial == m.sessions {
		id = watchIDSession
	}
	m.drop(serial, w)
	m.logEvent(keyctl.Notification{Kind: keyctl.NotifyRemoved, Key: serial, WatchID: id})
	if id == watchIDSession {
		m.endOnce.Do(func() { close(m.ended) })
	}
	return 0
}

// sync waits until every consumer has logged what happened before it.
func (m *monitor) sync() keyctl.Errno {
	if err := m.poke(); err != nil {
		return errnoOf(err)
	}
	m.mu.Lock()
	want := m.markers
	m.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	timer := time.AfterFunc(5*time.Second, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		behind := false
		for _, w := range m.watches {
			if w.base+w.markers < want {
				behind = true
			}
		}
		if !behind || time.Now().After(deadline) {
			return 0
		}
		m.cond.Wait()
	}
}

func (m *monitor) closeAll() {
	m.mu.Lock()
	ws := m.watches
	m.watches = map[keyctl.Serial]*watchConn{}
	m.mu.Unlock()
	for _, w := range ws {
		w.cl.Close()
	}
	m.poke()
}

// serve answers the requests of watch_add, watch_rm and watch_sync.
func (m *monitor) serve(f *os.File) {
	defer m.wg.Done()
	buf := make([]byte, 128)
	for {
		n, err := f.Read(buf)
		if err != nil || n == 0 {
			return
		}
		verb, arg, _ := strings.Cut(string(buf[:n]), " ")
		id, _ := strconv.ParseInt(arg, 10, 32)
		var errno keyctl.Errno
		switch verb {
		case "add":
			errno = m.add(keyctl.Serial(id), watchIDAdded)
		case "rm":
			errno = m.remove(keyctl.Serial(id))
		case "sync":
			errno = m.sync()
		default:
			errno = keyctl.EINVAL
		}
		if _, err := f.Write([]byte(strconv.Itoa(int(errno)))); err != nil {
			return
		}
	}
}

// monitorRequest sends a request on the watch_session socket at fd and
// returns the errno of the answer; an fd that is not such a socket is
// EINVAL, as the kernel says of an fd that is not a notification pipe.
func monitorRequest(fd int, req string) keyctl.Errno {
	if fd < 0 {
		return keyctl.EINVAL
	}
	typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil || typ != syscall.SOCK_SEQPACKET {
		return keyctl.EINVAL
	}
	if _, err := syscall.Write(fd, []byte(req)); err != nil {
		return keyctl.EINVAL
	}
	buf := make([]byte, 32)
	n, err := syscall.Read(fd, buf)
	if err != nil || n <= 0 {
		return keyctl.EINVAL
	}
	v, err := strconv.Atoi(string(buf[:n]))
	if err != nil {
		return keyctl.EINVAL
	}
	return keyctl.Errno(v)
}

// watchFD is watch_add (id 2) and watch_rm (id -1).
func (a *app) watchFD(args []string, id int) {
	if len(args) != 3 {
		a.format()
	}
	fd := atoi(args[1])
	key := a.getKeyID(args[2])
	req := "add "
	if id < 0 {
		req = "rm "
	}
	if errno := monitorRequest(fd, req+strconv.Itoa(int(key))); errno != 0 {
		a.fail("keyctl_watch_key", errno)
	}
}

func (a *app) cmdWatchSync(args []string) {
	if len(args) != 2 {
		a.format()
	}
	fd := atoi(args[1])
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); e != 0 || fd < 0 {
		a.fail("ioctl(FIONREAD)", syscall.EBADF)
	}
	if errno := monitorRequest(fd, "sync"); errno != 0 && errno != keyctl.EINVAL {
		a.fail("ioctl(PIPE_IOC_SYNC)", errno)
	}
}
