package sock

import (
	"errors"
	"io"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/wire"
)

// Stream is what a [Conn] runs on: a Unix stream socket, as a
// *[net.UnixConn] or an *[os.File], non-blocking under the runtime's poller.
type Stream interface {
	io.ReadWriteCloser
	syscall.Conn
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Conn is one end of a connection: frames in through In, frames out
// through Out.
type Conn struct {
	s   Stream
	raw syscall.RawConn

	// In reads the frames that arrive; its buffer holds size bytes
	// between large frames, and is wiped as each frame is done with.
	In *wire.Reader
	// Out gathers frames to send, with Flush or FlushAndWait, which wipe
	// it once they are written.
	Out Frames

	x exchange // FlushAndWait's, kept here so that its callback allocates nothing

	// blocking: s is a blocking socket (SetBlocking).
	blocking bool

	// spin is how long FlushAndWait may poll for the peer before it
	// sleeps (SetSpin); lastWait is how long its last wait lasted, 0
	// before the first.
	spin     time.Duration
	lastWait time.Duration
	gate     SpinGate // SetSpinGate's, or nil

	// Descriptors passed with SCM_RIGHTS, where AcceptFDs allows them.
	fdMax int
	fds   []int
	oob   []byte
}

// AcceptFDs makes the [Conn] receive descriptors passed with SCM_RIGHTS
// along with its frames, holding at most max of them until they are taken
// ([Conn.TakeFD]); more are closed as they arrive. Without it, the kernel
// closes any descriptor sent, as a plain read discards it.
func (c *Conn) AcceptFDs(max int) {
	c.fdMax = max
	c.oob = make([]byte, unix.CmsgSpace(4*max))
}

// SetBlocking tells the [Conn] that its stream is a blocking socket, not on
// the runtime's poller (a client made WithBlockingIO): [Conn.FlushAndWait]
// then waits for the answer in the read system call itself, there being no
// poller to wait on.
func (c *Conn) SetBlocking() { c.blocking = true }

// Blocking reports whether [Conn.SetBlocking] was called.
func (c *Conn) Blocking() bool { return c.blocking }

// Spin is how long the [Conn] polls ([Conn.SetSpin]), 0 if it never does.
func (c *Conn) Spin() time.Duration { return c.spin }

// TakeFD returns the oldest descriptor received and not yet taken; the
// caller owns it.
func (c *Conn) TakeFD() (int, bool) {
	if len(c.fds) == 0 {
		return -1, false
	}
	fd := c.fds[0]
	c.fds = c.fds[1:]
	return fd, true
}

// CloseFDs closes the descriptors received and not taken.
func (c *Conn) CloseFDs() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// keep holds the descriptors of a control message, up to the bound.
func (c *Conn) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd) // where RecvFlags could not
			if len(c.fds) < c.fdMax {
				c.fds = append(c.fds, fd)
			} else {
				unix.Close(fd)
			}
		}
	}
}

// recvmsg reads once from fd, keeping any descriptors that come with the
// bytes.
func (c *Conn) recvmsg(fd int, p []byte) (int, error) {
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, p, c.oob, RecvFlags)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if oobn > 0 {
			c.keep(c.oob[:oobn])
		}
		return n, err
	}
}

// New returns a [Conn] on s whose reader keeps a buffer of size bytes.
func New(s Stream, size int) (*Conn, error) {
	raw, err := s.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &Conn{s: s, raw: raw}
	c.x.fd = -1
	c.In = wire.NewReader(source{c}, size)
	return c, nil
}

// InArena puts the [Conn]'s buffers, In's and Out's, in secmem's arena:
// outside Go's heap, locked while the memory lock limit allows, never
// dumped, wiped when freed. The frames a daemon reads and writes carry
// payloads, and a daemon that cannot lock all its memory would otherwise
// have them in memory the kernel may swap out. Call it before the first
// frame; the owner must then call [Conn.Release] once done with the Conn,
// and use none of the frames In handed out after.
func (c *Conn) InArena() {
	c.In.SetMemory(arenaMemory{})
	c.Out.InArena()
}

// Release wipes and frees the [Conn]'s buffers (bytes read and not handed
// out are lost). The Conn remains usable, with new buffers.
func (c *Conn) Release() {
	c.In.Release()
	c.Out.Release()
}

// arenaMemory is secmem's arena as a wire.Reader's Memory.
type arenaMemory struct{}

func (arenaMemory) Alloc(n int) []byte       { return secmem.Alloc(n) }
func (arenaMemory) Free(b []byte)            { secmem.Free(b) }
func (arenaMemory) Copy(dst, src []byte) int { return secmem.Copy(dst, src) }

// source is what In reads from: inside FlushAndWait's raw read, where the
// poller has just said the socket is readable, a read system call on the
// descriptor; elsewhere the stream's own Read, which waits on the poller.
type source struct{ c *Conn }

// errWouldBlock reports a read in the raw read that found nothing: the
// wake-up was not for data, and the wait goes on.
var errWouldBlock = errors.New("sock: nothing to read yet")

func (s source) Read(p []byte) (int, error) {
	c := s.c
	fd := c.x.fd
	if fd < 0 {
		if c.fdMax == 0 {
			return c.s.Read(p)
		}
		// recvmsg, so that descriptors are received, on the poller.
		var n int
		var rerr error
		err := c.raw.Read(func(fd uintptr) bool {
			n, rerr = c.recvmsg(int(fd), p)
			// On a blocking socket, EAGAIN is its receive timeout.
			return c.blocking || !errors.Is(rerr, unix.EAGAIN)
		})
		if err == nil {
			err = rerr
		}
		if n < 0 {
			n = 0 // recvmsg's -1 on a failure, the last one before a deadline cut the wait short
		}
		if err == nil && n == 0 && len(p) > 0 {
			err = io.EOF
		}
		return n, err
	}
	for {
		var n int
		var err error
		if c.fdMax > 0 {
			n, err = c.recvmsg(fd, p)
		} else {
			n, err = unix.Read(fd, p)
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, errWouldBlock
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Stream returns the socket the [Conn] runs on.
func (c *Conn) Stream() Stream { return c.s }

// Flush writes the frames in Out with a plain write and wipes Out. It
// returns whether Out was dropped for having grown beyond [KeepMax].
func (c *Conn) Flush() (dropped bool, err error) {
	if c.Out.Len() > 0 {
		_, err = c.s.Write(c.Out.Bytes())
	}
	return c.Out.Reset(), err
}

// FlushFD writes the frames in Out with descriptor fd passed along
// (SCM_RIGHTS), and wipes Out.
func (c *Conn) FlushFD(fd int) error {
	f := c.Out.Bytes()
	rights := unix.UnixRights(fd)
	sent := false
	var serr error
	err := c.raw.Write(func(s uintptr) bool {
		for {
			n, err := unix.SendmsgN(int(s), f, rights, nil, 0)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				return false
			case err != nil:
				serr = err
				return true
			}
			f, rights, sent = f[n:], nil, true
			if len(f) == 0 {
				return true
			}
		}
	})
	c.Out.Reset()
	if err == nil {
		err = serr
	}
	if err == nil && !sent {
		err = io.ErrShortWrite
	}
	return err
}

// DefaultSpin is how long both ends of ukeys' socket poll by default
// where the client asks for it ([wire.Polls]): about three round trips of
// a call on a machine where a context switch is dear, within which a
// client in a loop sends its next request; a shorter poll catches too few
// of them to matter.
const DefaultSpin = 100 * time.Microsecond

// SetSpin makes [Conn.FlushAndWait] poll the socket for up to d before its
// thread sleeps in the wait, when the peer's last answer (or request)
// came within d. A client calling in a tight loop, and the server
// answering it, then meet each other's frames without a sleep and a
// wake-up each way, which on a machine where a context switch is dear is
// most of a call's cost (docs/figures.md, "Payloads"). A peer that
// answers slower than d, or a connection used once, costs nothing: the
// poll begins only once a wait has been shorter than d. On a single
// processor it never begins, as the poll would hold the processor the peer
// needs; and one [Conn] of a process polls at a time.
//
// Both ends must poll: a client polling alone holds a processor that the
// server's thread, still asleep and to be woken, needs. And a server must
// poll only for a client that asks: polling for every connection whose
// last wait was short takes much of the throughput of clients that do not
// poll, the poll timing out while their requests queue.
func (c *Conn) SetSpin(d time.Duration) {
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		d = 0
	}
	c.spin, c.lastWait = d, 0
}

// A SpinGate decides whether and for how long a [Conn] may poll
// ([Conn.SetSpinGate]): a server that serves many users grants the poll from
// a budget of the user's, and cuts it short when other work is waiting.
type SpinGate interface {
	// Begin returns how long the Conn may poll now, at most want; 0:
	// not at all.
	Begin(want time.Duration) time.Duration
	// Continue is asked between polls; false ends the poll.
	Continue() bool
	// End says how long the poll lasted of the granted time.
	End(granted, spent time.Duration)
}

// SetSpinGate makes g decide each of the [Conn]'s polls (see
// [Conn.SetSpin]).
func (c *Conn) SetSpinGate(g SpinGate) { c.gate = g }

// FlushAndWait writes the frames in Out, wipes them, and waits, without reading,
// until the socket is readable: a client waiting for its answer, or a
// server waiting for the next request of a client that sends one at a
// time, skips the read that would fail right after the write (one system
// call of the three a round trip would cost). then, if not nil, runs
// once everything is written; if it returns true, FlushAndWait returns
// at once with stopped set (a server whose connection is to close).
//
// Waiting without reading first is safe only because the write happens
// inside the raw read: the runtime forgets the socket's readiness when a
// raw read begins, so anything arriving after the write wakes it, and
// the peer sends nothing before it has read what is written here. If the
// socket is full, the rest is written the plain way and the wait is left
// to the next read. Out is wiped either way; dropped says whether it was
// dropped for having grown beyond [KeepMax].
func (c *Conn) FlushAndWait(then func() bool) (stopped, dropped bool, err error) {
	x := &c.x
	f := c.Out.Bytes()
	*x = exchange{f: f, then: then, step: x.step, in: c.In, out: &c.Out, fd: -1, blocking: c.blocking, gate: c.gate}
	if c.spin > 0 {
		x.timed = true
		if c.lastWait > 0 && c.lastWait <= c.spin {
			x.spin = c.spin
		}
	}
	if x.step == nil {
		x.step = x.advance // bound once: a method value per call would allocate
	}
	rerr := c.raw.Read(x.step)
	written, stopped, err := x.written, x.stopped, x.err
	reset, dropped := x.reset, x.dropped
	if !x.since.IsZero() && rerr == nil && err == nil && !stopped { // since: set only where timed
		c.lastWait = time.Since(x.since)
	}
	x.f, x.then, x.in, x.out = nil, nil, nil, nil
	switch {
	case err != nil:
	case written < len(f):
		if _, err = c.s.Write(f[written:]); err == nil && then != nil {
			dropped, reset = c.Out.Reset(), true
			stopped = then()
		}
	case rerr != nil:
		// Closed, or silent past the read deadline: the read that
		// follows would say the same.
		err = rerr
	}
	if !reset {
		dropped = c.Out.Reset()
	}
	return stopped, dropped, err
}

// exchange is the state of one FlushAndWait.
type exchange struct {
	in       *wire.Reader
	out      *Frames
	reset    bool // out was wiped once written, before the wait
	dropped  bool // and dropped
	fd       int  // the descriptor while the callback reads, else -1
	blocking bool // the Conn's
	f        []byte
	written  int
	wrote    bool
	stopped  bool
	err      error
	then     func() bool
	step     func(fd uintptr) bool

	timed bool          // the Conn spins: since is set once written
	since time.Time     // when the frames were written
	spin  time.Duration // how long to poll before the wait sleeps
	gate  SpinGate      // the Conn's, or nil
	pfd   [1]unix.PollFd
}

// spinning is set while a Conn of the process polls (await): one at a
// time, so that a daemon with many clients in loops gives at most one
// processor to polling, and the others to the requests.
var spinning atomic.Bool

// await polls fd for up to x.spin, yielding the processor between polls,
// and reports whether something arrived (or the peer went); false at once
// if another Conn is polling. Yielding lets the process's other work run
// meanwhile, at a price for other connections whose wake-ups the runtime's
// poller is then slower to notice, the polling goroutine being always
// runnable; hence the poll only for clients that ask for it (wire.Polls).
func (x *exchange) await(fd int) bool {
	if !spinning.CompareAndSwap(false, true) {
		return false
	}
	defer spinning.Store(false)
	spin := x.spin
	if x.gate != nil {
		if spin = x.gate.Begin(spin); spin <= 0 {
			return false
		}
	}
	x.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	ready := false
	for end := x.since.Add(spin); ; {
		if n, _ := unix.Poll(x.pfd[:], 0); n > 0 {
			ready = true
			break
		}
		if !time.Now().Before(end) || x.gate != nil && !x.gate.Continue() {
			break
		}
		runtime.Gosched()
	}
	if x.gate != nil {
		x.gate.End(spin, time.Since(x.since))
	}
	return ready
}

// advance is the raw read's callback: it writes the frames the first
// time, and reads what arrives after.
func (x *exchange) advance(fd uintptr) bool {
	if x.wrote {
		// Readable, or woken for nothing: take what arrived now, in this
		// system call, rather than wait on the poller again to read it.
		return x.fill(fd) != errWouldBlock // anything else, EOF included, the reader meets again
	}
	x.wrote = true
	for x.written < len(x.f) {
		n, err := unix.Write(int(fd), x.f[x.written:])
		if n > 0 {
			x.written += n
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return true // the socket is full: finish with a plain write
		case err != nil:
			x.err = err
			return true
		}
	}
	// Written: wiped before the wait, so that an idle connection holds
	// no answer (a payload) while it waits, perhaps for minutes.
	x.dropped, x.reset = x.out.Reset(), true
	if x.then != nil && x.then() {
		x.stopped = true
		return true
	}
	if x.timed {
		x.since = time.Now()
	}
	if x.spin > 0 && x.await(int(fd)) && !x.blocking && x.fill(fd) != errWouldBlock {
		return true // readable without sleeping: read here, as a wake-up would
	}
	if x.blocking {
		// No poller to wait on: the read waits, in this system call.
		// What it meets (an error, EOF) the reader meets again.
		x.fill(fd)
		return true
	}
	return false // wait until something can be read
}

// fill reads what fd has into the reader, in the callback's own system
// call (source.Read), and returns the reader's error.
func (x *exchange) fill(fd uintptr) error {
	x.fd = int(fd)
	err := x.in.Fill()
	x.fd = -1
	return err
}

// Deadline keeps a deadline Timeout ahead of a connection's last activity.
// Moving a socket's deadline re-arms a runtime timer, which on every request
// would cost more than serving a key read; [Deadline.Renew] moves it only
// once an eighth of the timeout has passed, so that a silent connection
// meets it between 7/8 and all of the timeout after its last activity.
type Deadline struct {
	Timeout time.Duration
	at      time.Time
}

// Renew returns the deadline to set and true when it is due to move, or
// false when the one set last still holds. A zero Timeout never sets one.
func (d *Deadline) Renew(now time.Time) (time.Time, bool) {
	if d.Timeout <= 0 {
		return time.Time{}, false
	}
	if !d.at.IsZero() && d.at.Sub(now) >= d.Timeout-d.Timeout/8 {
		return d.at, false
	}
	d.at = now.Add(d.Timeout)
	return d.at, true
}
