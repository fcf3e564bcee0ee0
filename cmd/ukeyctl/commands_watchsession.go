package main

// keyctl watch_session, watch_add, watch_rm and watch_sync.
//
// keyctl watches keys through a kernel notification pipe that
// watch_session hands to its program as a file descriptor; watch_add and
// watch_rm, run by that program, add and remove watches on that pipe. The
// daemon has no such pipes: a connection's watches report to that
// connection. So watch_session keeps one connection for all its watches,
// whose queue orders their records as the pipe would (a move's unlink
// from one watched keyring before its link into another), and hands its
// program the end of a socket instead, on which watch_add, watch_rm and
// watch_sync send their requests ("add <id>", "rm <id>", "sync") and read
// the errno of the answer. What ends up in the logs is what keyctl writes
// there.

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

// monitor is watch_session's side: the watch connection, its consumer,
// and the request socket.
//
// The consumer alone uses the watch connection, since the daemon serves
// nothing else on a connection while it waits there for an event. A
// request for a watch is queued for it, and the marker keyring is changed
// (poked) so that the consumer's wait ends on an event of the marker,
// whose watch is on the same connection; the consumer then serves the
// requests queued before that event. A marker event also tells that every
// record posted before the poke has been logged (watch_sync).
type monitor struct {
	a       *app
	filter  *watchFilter
	logMu   sync.Mutex
	log, gc *os.File

	primary *client.Client
	watcher *client.Client // every watch's connection, the consumer's
	marker  keyctl.Serial  // keyring whose changes mark a sync point

	// markMu orders the marker's changes, so that the nth poke is the
	// nth marker event the consumer sees.
	markMu sync.Mutex

	mu      sync.Mutex
	reqs    []watchReq // for the consumer to serve
	markers int        // markers posted
	seen    int        // markers the consumer has seen
	stopped bool       // the consumer has ended
	cond    *sync.Cond
	wg      sync.WaitGroup
	ended   chan struct{} // the session keyring's watch went
	endOnce sync.Once
}

// watchReq is a request to watch a key (id 0..255) or to stop (id -1); the
// consumer answers it with an errno.
type watchReq struct {
	key   keyctl.Serial
	id    int
	errno chan keyctl.Errno
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
	m := &monitor{a: a, filter: &filter, ended: make(chan struct{})}
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
	desc := "_watch_sync"
	if m.marker, err = m.primary.AddKey("keyring", desc, nil, keyctl.ProcessKeyring); err != nil {
		a.fail("ukeyctl: watch_session", err)
	}
	if m.watcher, err = client.Dial(client.DefaultSocket()); err != nil {
		a.fail("ukeyctl: watch_session", err)
	}
	if err := m.watcher.WatchKey(m.marker, watchIDSync); err != nil {
		m.watcher.Close()
		a.fail("keyctl_watch_key/sync", err)
	}
	if err := m.watcher.WatchKey(session, watchIDSession); err != nil {
		m.watcher.Close()
		a.fail("keyctl_watch_key/session", err)
	}
	// Whatever happens from here on, the watches and their consumer go
	// before this returns (or exits).
	m.wg.Add(1)
	go m.consume()
	defer func() {
		m.closeAll()
		m.wg.Wait()
	}()
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
	go m.serveRequests(ours)

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
		m.sync() // what the program did is logged before the end
		m.logf(m.log, "Monitoring terminated\n")
		m.logf(m.gc, "Monitoring terminated\n")
	}
	a.exit(code)
}

// add watches key on the watch connection, returning the errno of a
// failure (0 on success).
func (m *monitor) add(key keyctl.Serial, watchID int) keyctl.Errno {
	return m.request(key, watchID)
}

// request has the consumer watch key with watchID (-1: stop watching it)
// and returns its errno.
func (m *monitor) request(key keyctl.Serial, watchID int) keyctl.Errno {
	r := watchReq{key: key, id: watchID, errno: make(chan keyctl.Errno, 1)}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return errBadFD
	}
	m.reqs = append(m.reqs, r)
	m.mu.Unlock()
	if err := m.poke(); err != nil {
		// No event will come for r: take it back unless the consumer
		// took it already (then it answers).
		m.mu.Lock()
		for i, q := range m.reqs {
			if q.errno == r.errno {
				m.reqs = append(m.reqs[:i:i], m.reqs[i+1:]...)
				m.mu.Unlock()
				return errnoOf(err)
			}
		}
		m.mu.Unlock()
	}
	// Served after the poke's event, or refused when the consumer ends.
	return <-r.errno
}

// errBadFD is watch_add's errno once watch_session's queue has gone.
const errBadFD = keyctl.Errno(syscall.EBADF)

// consume logs the watch connection's events and serves the requests
// queued before each marker event.
func (m *monitor) consume() {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		m.stopped = true
		reqs := m.reqs
		m.reqs = nil
		m.cond.Broadcast()
		m.mu.Unlock()
		for _, r := range reqs {
			r.errno <- errBadFD
		}
	}()
	for {
		n, err := m.watcher.NextNotification()
		if err != nil {
			return
		}
		if n.WatchID == watchIDSync {
			if n.Kind == keyctl.NotifySetAttr {
				m.serve()
				m.mu.Lock()
				m.seen++
				m.cond.Broadcast()
				m.mu.Unlock()
			}
			continue
		}
		if !m.filter.pass(n.Kind) {
			continue
		}
		m.logEvent(n)
		if n.Kind == keyctl.NotifyRemoved && n.WatchID == watchIDSession {
			m.endOnce.Do(func() { close(m.ended) })
		}
	}
}

// serve answers the queued requests on the watch connection.
func (m *monitor) serve() {
	m.mu.Lock()
	reqs := m.reqs
	m.reqs = nil
	m.mu.Unlock()
	for _, r := range reqs {
		var errno keyctl.Errno
		if err := m.watcher.WatchKey(r.key, r.id); err != nil {
			errno = errnoOf(err)
		}
		r.errno <- errno
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

// poke changes the marker keyring, so that the consumer gets an event
// after every record posted before. The daemon serves a connection's wait
// for its next event without reading from it, so a connection closed
// while it waits stays blocked in the daemon until an event comes; the
// poke releases it.
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

// remove is watch_rm: the watch goes, and the daemon queues the removal
// record the kernel would; it is logged before watch_rm returns.
func (m *monitor) remove(key keyctl.Serial) keyctl.Errno {
	if errno := m.request(key, -1); errno != 0 {
		return errno
	}
	return m.sync()
}

// sync waits until the consumer has logged what was posted before it.
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
	for m.seen < want && !m.stopped && time.Now().Before(deadline) {
		m.cond.Wait()
	}
	return 0
}

func (m *monitor) closeAll() {
	m.watcher.Close()
	m.poke()
}

// serveRequests answers the requests of watch_add, watch_rm and
// watch_sync.
func (m *monitor) serveRequests(f *os.File) {
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
