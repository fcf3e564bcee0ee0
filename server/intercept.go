package server

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// A client may hand the daemon a seccomp listener (OpIntercept, the
// descriptor passed with the request): the daemon then serves the
// add_key, keyctl and request_key system calls of the processes under
// that filter (ukeyctl run) as calls of those processes, exactly as if
// they had made them over the socket: each is a process the daemon keeps
// (by pid, start time and pidfd), with its credentials read from /proc,
// its capabilities, and the session it inherits.

// intercepting is the server's part of a process's intercepted calls.
type intercepting struct {
	mu sync.Mutex // one call at a time per process
	// caller is the first thread's (the process's own keys.Caller),
	// made at its first call.
	caller *caller
	// threads are the process's other threads, a caller each
	// (keys.Caller.NewThread), by the task each is (intercept.Caller.Task),
	// never by thread id alone: a thread that has exited leaves its id to
	// the next thread made, which must not find its thread keyring.
	threads map[uint64]*threadCaller
	// task is the intercept.Caller.Task of the thread whose call last
	// found the process known (interceptedProc); guarded by the
	// server's mu.
	task uint64
	// execd: the process events connector has reported an exec of the
	// process, whose threads are to be dropped before its next call.
	execd atomic.Bool
}

// threadCaller is one thread's caller, and the id the thread had.
type threadCaller struct {
	tid int
	c   *caller
	// pending: handed over by a daemon that knew the thread by its id
	// alone (no task identity), and not yet met again.
	pending bool
}

// adopt keeps a caller for the thread of process p that the previous
// daemon handed over, acting as kc: by the task it is, where that daemon
// knew it, and otherwise by its id until its next call.
func (ic *intercepting) adopt(s *Server, p *proc, tid int, task uint64, kc *keys.Caller) {
	if ic.threads == nil {
		ic.threads = make(map[uint64]*threadCaller)
	}
	tc := &threadCaller{tid: tid, c: interceptedCaller(s, p, kc)}
	if task == 0 {
		task, tc.pending = pendingTask(tid), true
	}
	ic.threads[task] = tc
}

// pendingTask is the key of a thread handed over by id alone: above
// every task number a listener gives.
func pendingTask(tid int) uint64 { return 1<<63 | uint64(uint32(tid)) }

// maxThreads is how many threads' callers a process keeps before it
// looks for those that have exited.
const maxThreads = 64

// release drops the threads' callers, as the process's exit does.
func (ic *intercepting) release() {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.releaseLocked()
}

// releaseLocked is release with ic.mu held.
func (ic *intercepting) releaseLocked() {
	for _, tc := range ic.threads {
		tc.c.kc.Release()
	}
	ic.threads = nil
}

// thread returns the caller of the thread of process p that is task
// (tid its id now), making it, a thread of p's (its own @t, p's @p), on
// its first call. ic.mu is held.
func (ic *intercepting) thread(s *Server, p *proc, task uint64, tid int) *caller {
	if tc := ic.threads[task]; tc != nil {
		return tc.c
	}
	if tc := ic.threads[pendingTask(tid)]; tc != nil {
		// Handed over by id: the thread that had it then, unless it
		// exited in between.
		delete(ic.threads, pendingTask(tid))
		tc.pending = false
		ic.threads[task] = tc
		return tc.c
	}
	for t, tc := range ic.threads {
		// The caller has tid now: a task kept with that id has exited.
		if tc.tid == tid {
			tc.c.kc.Release()
			delete(ic.threads, t)
		}
	}
	if len(ic.threads) >= maxThreads {
		// Forget the threads that have exited (and so their @t).
		for t, tc := range ic.threads {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", p.handle.PID(), tc.tid)); err != nil {
				tc.c.kc.Release()
				delete(ic.threads, t)
			}
		}
	}
	if ic.threads == nil {
		ic.threads = make(map[uint64]*threadCaller)
	}
	tc := interceptedCaller(s, p, p.caller.NewThread())
	ic.threads[task] = &threadCaller{tid: tid, c: tc}
	return tc
}

// interceptedCaller returns a caller of process p's intercepted calls,
// acting as kc: p's own, or one of its threads'.
func interceptedCaller(s *Server, p *proc, kc *keys.Caller) *caller {
	return &caller{s: s, cred: kc.Cred(), proc: p, kc: kc, intercepted: true}
}

// intercept serves the listener passed with the request.
func (c *caller) intercept() error {
	if c.conn == nil {
		// In process (Local) or intercepted: no descriptor to pass.
		return keys.EOPNOTSUPP
	}
	fd, ok := c.conn.sc.TakeFD()
	if !ok {
		return keys.EINVAL
	}
	var h intercept.Handler = intercept.HandlerFunc(c.s.intercepted)
	if c.helper != nil {
		// A request-key helper's program tree: every call of it acts
		// for the requestor with the upcall's authority, as the helper's
		// own calls do, and only while it lasts.
		hc := &caller{s: c.s, cred: c.cred, proc: c.proc, kc: c.kc, helper: c.helper, intercepted: true}
		h = intercept.HandlerFunc(func(ic intercept.Caller, r *wire.Request) *wire.Response { return hc.dispatchPiped(ic, r) })
	}
	// ukeyctl run's filter (intercept.Filter) hands the daemon its
	// programs' notification pipes too.
	_, err := c.s.startListener(fd, listenerInfo{uid: c.account(), helper: c.helper != nil, notify: true}, h)
	return err
}

// ServeListener serves the key system calls that the seccomp listener fd
// receives ([intercept.Install]), as a client's [wire.OpIntercept] does,
// until every process under its filter has exited or the server shuts down.
// It takes fd. The seccomp agent (package agent) serves each container's
// listeners this way, on a [Server] of the container's own.
func (s *Server) ServeListener(fd int) error { return s.serveListener(fd, false) }

// ServeNotifyListener is [Server.ServeListener] for a listener whose filter
// hands the daemon its programs' notification pipes too
// ([intercept.Filter]'s pipe2 and watch-queue ioctls): their key watches are
// then served, and KEYCTL_CAPABILITIES says there are notifications. It
// exists for the seccomp agent, which serves a container's listener so when
// the container's profile says so in its listenerMetadata (ukeyctl
// seccomp-profile writes it).
func (s *Server) ServeNotifyListener(fd int) error { return s.serveListener(fd, true) }

// StartListener is ServeListener (or, with notify, ServeNotifyListener)
// that returns once the listener is served, with a channel closed when
// it is no longer served: the seccomp agent knows then that a hand-over
// finds the listener (package agent). tag goes with the listener through
// a hand-over ([TakeoverResult].SeccompTags): the agent's name of the
// container it is of.
func (s *Server) StartListener(fd int, notify bool, tag string) (<-chan struct{}, error) {
	return s.startListener(fd, listenerInfo{notify: notify, tag: tag}, intercept.HandlerFunc(s.intercepted))
}

// serveListener is ServeListener, or with notify ServeNotifyListener.
func (s *Server) serveListener(fd int, notify bool) error {
	done, err := s.startListener(fd, listenerInfo{notify: notify}, intercept.HandlerFunc(s.intercepted))
	if err != nil {
		return err
	}
	<-done
	return nil
}

// startListener starts serving listener fd for uid, within uid's bound,
// and returns a channel closed when it is no longer served. It takes fd.
// listenerInfo is what the server keeps of a seccomp listener: whose
// it is, and whether it serves a request-key helper's tree (whose calls
// act with the upcall's authority).
type listenerInfo struct {
	uid    uint32 // the uid it is charged to (caller.account)
	helper bool
	// notify: its filter hands the daemon the calls that make and set
	// up a notification pipe (intercept.Filter's pipe2 and ioctls), so
	// that its programs' watches are served; without them, they are
	// told that there are no notifications (KEYCTL_CAPABILITIES).
	notify bool
	tag    string // StartListener's
}

func (s *Server) startListener(fd int, li listenerInfo, h intercept.Handler) (<-chan struct{}, error) {
	uid := li.uid
	if !intercept.IsListener(fd) {
		closeFD(fd)
		return nil, keys.EINVAL
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		closeFD(fd)
		return nil, keys.EPERM
	}
	// The listener's own descriptors count as a process kept, within
	// the uid's bound and the daemon's.
	if e := s.usage.admitProc(uid); e != 0 {
		s.usage.forget(uid)
		s.mu.Unlock()
		closeFD(fd)
		return nil, e
	}
	s.mu.Unlock()
	if !li.notify {
		h = withoutNotify{h}
	}
	l, err := intercept.NewListener(fd, h)
	if err != nil {
		s.mu.Lock()
		s.usage.dropProc(uid)
		s.mu.Unlock()
		return nil, keys.EINVAL
	}
	l.SetBudget(listenerBudget{s, uid})
	s.mu.Lock()
	if s.listeners == nil {
		s.listeners = make(map[*intercept.Listener]listenerInfo)
	}
	s.listeners[l] = li
	s.watchers.Add(1)
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer s.watchers.Done()
		defer close(done)
		if err := l.Serve(); err != nil {
			s.log.Debug("ukeyd: intercepted calls no longer served", "uid", uid, "err", err)
		}
		l.Close()
		s.mu.Lock()
		delete(s.listeners, l)
		s.usage.dropProc(uid)
		s.mu.Unlock()
	}()
	return done, nil
}

// listenerBudget charges the descriptors a seccomp listener keeps of its
// callers (a thread's /proc status, a process's memory, up to 256 of
// each) to the uid it serves, as processes kept: without it, one uid's
// listeners, each with threads that made a call and exited, would hold
// descriptors no bound counts, until accept failed for every uid
// (TestListenerDescriptorsAreChargedToTheirUID). They may take only half
// the uid's bound, so that a busy listener never keeps its own user's
// next process from connecting; over it, a listener serves its callers
// without keeping any.
type listenerBudget struct {
	s   *Server
	uid uint32
}

func (b listenerBudget) Take() bool {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if u := b.s.usage.of(b.uid); u.procs >= b.s.usage.lim.MaxProcsPerUID/2 {
		return false
	}
	return b.s.usage.admitProc(b.uid) == 0
}

// TakePipe draws a notification pipe made for one of the listener's
// callers from the uid's bound, as a process the daemon keeps.
func (b listenerBudget) TakePipe() bool {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.s.usage.admitProc(b.uid) == 0
}

func (b listenerBudget) Give() {
	b.s.mu.Lock()
	b.s.usage.dropProc(b.uid)
	b.s.mu.Unlock()
}

// intercepted serves one intercepted call of process ic.Pid, with the
// calling thread's credentials as they were at the call, and tells the
// [Observer] as a socket's calls are told: a container's key namespace
// counts its calls and refusals there (package agent).
func (s *Server) intercepted(ic intercept.Caller, r *wire.Request) *wire.Response {
	start := time.Now()
	resp := s.servedIntercepted(ic, r)
	s.cfg.Metrics.Observe(r.Op, resp.Errno, time.Since(start))
	return resp
}

// servedIntercepted is intercepted's call, served.
func (s *Server) servedIntercepted(ic intercept.Caller, r *wire.Request) *wire.Response {
	// An exec the connector has queued is applied before the new
	// program's call.
	s.syncForks()
	cred := credOf(ic)
	p, err := s.interceptedProc(cred, ic.Task)
	if err != nil {
		return fail(err)
	}
	p.calls.mu.Lock()
	defer p.calls.mu.Unlock()
	if p.calls.execd.Swap(false) {
		// The connector's exec event, applied to the process's keyrings
		// (handle) before this call: its threads go too.
		p.calls.releaseLocked()
	}
	if ic.Exec {
		// A new program: the threads it had are gone, and the process
		// keeps its session but neither thread nor process keyring.
		p.calls.releaseLocked()
		p.caller.Exec()
	}
	var c *caller
	if ic.Tid != ic.Pid && ic.Tid > 0 {
		// Another thread than the first: a thread keyring of its own.
		c = p.calls.thread(s, p, ic.Task, ic.Tid)
	} else {
		if p.calls.caller == nil {
			p.calls.caller = interceptedCaller(s, p, p.caller)
		}
		c = p.calls.caller
	}
	if cred.CapsIf != 0 {
		// Asked, at a check, of the call the thread makes then.
		cred.CapsIn = c
	}
	if !sameCred(&c.cred, &cred) {
		// The thread changed its credentials (setuid, setgroups, capset)
		// since its last call: the kernel checks the current ones.
		c.kc.SetCred(cred)
		c.cred = c.kc.Cred()
	}
	return c.dispatchPiped(ic, r)
}

// dispatchPiped dispatches an intercepted call, whose watch
// (KEYCTL_WATCH_KEY) names its queue by the caller's descriptor.
func (c *caller) dispatchPiped(ic intercept.Caller, r *wire.Request) *wire.Response {
	if ic.Status.CapEff != 0 {
		// Only a thread with capabilities is asked of them
		// (credOf's CapsIf); a copy, so that a call without any
		// allocates nothing for it.
		call := ic
		c.call.Store(&call)
		defer c.call.Store(nil)
	}
	if ic.Pipe == nil {
		return c.dispatch(r) // every call but a watch naming a pipe
	}
	c.pipe = ic.Pipe
	defer func() { c.pipe = nil }()
	return c.dispatch(r)
}

// withoutNotify serves the calls of a listener whose filter does not
// hand the daemon its programs' notification pipes (a container's
// profile that notifies the key calls alone): what such a program is
// told is what it gets, and its watches would need a notification pipe
// of the kernel's (pipe2(O_NOTIFICATION_PIPE)), which no daemon can post
// into, so it is not told that notifications are there. keyutils' own
// tests, told so, run every test inside a watch that fails.
type withoutNotify struct{ h intercept.Handler }

func (w withoutNotify) Serve(ic intercept.Caller, r *wire.Request) *wire.Response {
	resp := w.h.Serve(ic, r)
	if r.Op == wire.OpCapabilities && len(resp.Bufs) > 0 && len(resp.Bufs[0]) > 1 {
		resp.Bufs[0][1] &^= keys.Cap2Notifications
	}
	return resp
}

// watchPipe is a notification pipe this server's keys post to: the
// queue of its watches, and the uid whose call first watched through it
// (what a hand-over charges its descriptor to).
type watchPipe struct {
	q   *keys.WatchQueue
	uid uint32
}

// pipeQueue returns the watch queue through which this server's keys
// post to notification pipe p, made at its first watch (by uid) and
// closed (its watches removed) when the pipe ends; nil for no pipe.
func (s *Server) pipeQueue(p *intercept.WatchPipe, uid uint32) *keys.WatchQueue {
	if p == nil {
		return nil
	}
	s.mu.Lock()
	if wp := s.pipes[p]; wp.q != nil {
		s.mu.Unlock()
		return wp.q
	}
	q := keys.NewWatchSink(p.Post)
	s.adoptPipeLocked(p, q, uid)
	s.mu.Unlock()
	s.untilPipeEnds(p, q)
	return q
}

// adoptPipeLocked makes q the queue of p's watches.
func (s *Server) adoptPipeLocked(p *intercept.WatchPipe, q *keys.WatchQueue, uid uint32) {
	if s.pipes == nil {
		s.pipes = make(map[*intercept.WatchPipe]watchPipe)
	}
	s.pipes[p] = watchPipe{q: q, uid: uid}
	pipeOwners.Lock()
	pipeOwners.m[p] = s
	pipeOwners.Unlock()
}

// pipeOwners says which server of the process a notification pipe's
// watches are in: the pipes are the process's (intercept.WatchPipes),
// and a hand-over sends each with the server whose keys post to it
// (records).
var pipeOwners = struct {
	sync.Mutex
	m map[*intercept.WatchPipe]*Server
}{m: make(map[*intercept.WatchPipe]*Server)}

// pipeOwner returns the server whose watches post to p, if any.
func pipeOwner(p *intercept.WatchPipe) (*Server, bool) {
	pipeOwners.Lock()
	defer pipeOwners.Unlock()
	s, ok := pipeOwners.m[p]
	return s, ok
}

// untilPipeEnds closes q, p's queue, once p has ended (at once if it
// has): its watches go. s.mu is not held: a pipe that has ended calls
// back at once.
func (s *Server) untilPipeEnds(p *intercept.WatchPipe, q *keys.WatchQueue) {
	p.OnGone(func() {
		s.mu.Lock()
		if s.pipes[p].q == q {
			delete(s.pipes, p)
		}
		s.mu.Unlock()
		pipeOwners.Lock()
		if pipeOwners.m[p] == s {
			delete(pipeOwners.m, p)
		}
		pipeOwners.Unlock()
		q.Close()
	})
}

// credOf is the credentials of an intercepted call's thread, as the
// kernel's key checks see them: its filesystem uid and gid (fsuid,
// fsgid), which the kernel checks permissions against and makes a new
// key's owner (key_task_permission, key_alloc), and which are the
// effective ones unless the thread has set them apart (setfsuid).
func credOf(ic intercept.Caller) keys.Cred {
	st := &ic.Status
	// Capabilities count only in the daemon's user namespace, which is
	// learnt only if one is checked (CapsIf: intercepted), and a status
	// that shows none has none: never unknown, which would make uid 0
	// privileged whatever it holds.
	return keys.Cred{UID: st.UIDs[3], GID: st.GIDs[3], Groups: st.Groups, PID: ic.Pid,
		CapsIf: st.CapEff, CapsKnown: true}
}

// sameCred reports whether a and b are the same credentials (their pid
// aside).
func sameCred(a, b *keys.Cred) bool {
	return a.UID == b.UID && a.GID == b.GID && a.Caps == b.Caps && a.CapsKnown == b.CapsKnown &&
		a.CapsIf == b.CapsIf && a.CapsIn == b.CapsIn &&
		slices.Equal(a.Groups, b.Groups)
}

// interceptedProc returns the process cred.PID as the daemon keeps it,
// meeting it now if it has not yet: as accept does for a socket's peer,
// with the credentials its calling thread has (cred) and the session it
// inherits. task is the calling thread's intercept.Caller.Task.
func (s *Server) interceptedProc(cred keys.Cred, task uint64) (*proc, error) {
	pid := cred.PID
	// Known: the process the daemon keeps at that pid, while its pidfd
	// says it lives (the caller is blocked in the call, so the pid is
	// still its own). A thread it was found for at an earlier call
	// proves it without the pidfd: that thread still lives, so its
	// process has kept the pid since (a system call the less for each
	// intercepted call).
	// Under s.mu: a process leaves the table (and stops being tracked)
	// before its handle is closed.
	s.mu.Lock()
	p := s.procs.lookup(pid)
	known := p != nil && !p.ghost && p.tracked && p.handle.Pinned() &&
		(task != 0 && p.calls.task == task || !p.handle.Exited())
	if known {
		p.calls.task = task
	}
	s.mu.Unlock()
	if known {
		return p, nil
	}
	// Forks are followed from before the process is kept, as accept's.
	s.holdForks()
	defer s.unholdForks()
	start, ancestors := s.inheritance(pid)
	if start == "" {
		return nil, keys.EPERM // gone
	}
	euid := cred.UID
	s.mu.Lock()
	p = s.procs.lookup(pid)
	if p != nil && !p.ghost && p.start == start && p.caller.Cred().UID == euid {
		s.mu.Unlock()
		return p, nil
	}
	s.mu.Unlock()
	h, ok := process.OpenPID(pid, start)
	if !ok {
		return nil, keys.EPERM
	}
	if s.cfg.Member != nil && (!s.cfg.Member(pid) || h.Exited()) {
		// A container's key namespace serves the container's processes
		// and no other, whatever listener their calls come through: a
		// listener handed in under another container's id gets nothing.
		h.Close()
		s.logRefusal("ukeyd: seccomp agent: a process outside the container called through its listener; refused", "pid", pid)
		return nil, keys.EPERM
	}
	charge := chargeUID(cred, &h)
	var ended, ghost *proc
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		h.Close()
		return nil, keys.EPERM
	}
	if q := s.procs.lookup(pid); q != nil {
		if !q.ghost && q.start == start && q.caller.Cred().UID == euid {
			s.mu.Unlock() // met meanwhile
			h.Close()
			return q, nil
		}
		if q.ghost && q.start == start {
			ghost = q
		}
		s.dropProcLocked(q)
		if q.conns == 0 {
			ended = q
		}
	}
	if e := s.usage.admitProc(charge); e != 0 {
		s.mu.Unlock()
		h.Close()
		if ended != nil {
			ended.end()
		}
		return nil, e
	}
	p = &proc{caller: s.svc.NewCaller(cred), handle: h, start: start, tracked: true, charge: charge}
	if ghost != nil {
		p.inherited.Store(inherit(p, ghost.caller))
	} else {
		p.inherited.Store(s.inheritLocked(p, ancestors))
	}
	s.procs.add(pid, p)
	s.linger(p)
	s.mu.Unlock()
	if ended != nil {
		ended.end()
	}
	return p, nil
}

// closeFD closes a descriptor received and not kept.
func closeFD(fd int) { syscall.Close(fd) }

// CapsCount says whether the capabilities of intercepted thread c
// count: asked of the call it is making ([intercept.Caller.CapsCount]).
// Between its calls the check is another's that shares its keys caller:
// the main thread's is its process's, which the process's socket
// connections act as. Their capabilities count as a connection's do
// ([process.Handle.Capabilities]), if the process, pinned by its pidfd
// so that its pid is no other's, is in the daemon's user namespace.
func (c *caller) CapsCount() bool {
	if ic := c.call.Load(); ic != nil {
		return ic.CapsCount()
	}
	p := c.proc
	if p == nil || p.private || !p.handle.Pinned() {
		return false
	}
	same, err := p.handle.InOwnUserNS()
	return same && err == nil
}
