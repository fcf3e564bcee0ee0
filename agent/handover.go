package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// An agent's containers go with the daemon's own hand-over (ukeyd
// -takeover) and with its restart through systemd's file-descriptor
// store (server.Server.Freeze, server.Thaw): the daemon's Server carries
// the agent's section after its own state (server.Config.HandOverExtra
// and TakeOverExtra, which HandOver and TakeOver are). The section
// holds the agent's listening sockets and, for each container, its id,
// its identity, a pidfd of its init (by which the next daemon binds the
// id to the same container, whatever became of the init's pid), and its
// Server's own frozen state: its keys, processes, threads, seccomp
// listeners (detached between two calls: a call made meanwhile waits in
// its caller) and notification pipes. Runtimes that connect meanwhile
// wait in the socket's backlog; one accepted already is served before
// the containers are frozen.
//
// The section is:
//
//	uint32 big-endian n, then n bytes of JSON: sectionHeader
//	then each namespace's frozen state, in the header's order
//	(self-delimiting: server.Thaw reads exactly its own)

// HandoverVersion is the version of the agent's section. A daemon reads
// every earlier version and refuses a later one.
const HandoverVersion = 1

// maxHeader bounds the section's header (a record per container).
const maxHeader = 16 << 20

// sectionHeader is what the section says before the namespaces' states.
type sectionHeader struct {
	Version int `json:"version"`
	// Listeners is how many of the section's descriptors, the first,
	// are the agent's listening sockets.
	Listeners  int        `json:"listeners"`
	Namespaces []nsRecord `json:"namespaces"`
}

// nsRecord is one container's namespace. Its Server's descriptors are
// FDs of the section's, from the FDth; Init is the index of its init's
// pidfd (-1: none, the init is then known by PID and Start).
type nsRecord struct {
	ID    string           `json:"id"`
	Who   container.Record `json:"who"`
	Init  int              `json:"init"`
	PID   int              `json:"pid,omitempty"`
	Start string           `json:"start,omitempty"`
	FD    int              `json:"fd"`
	FDs   int              `json:"fds"`
}

// writeHeader writes h as the section begins.
func writeHeader(w io.Writer, h *sectionHeader) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readHeader reads the section's header and checks it against the fds
// descriptors that came with it: every index in range, none used twice,
// the version one this daemon reads.
func readHeader(r io.Reader, fds int) (*sectionHeader, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, fmt.Errorf("agent: the section's header: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHeader {
		return nil, fmt.Errorf("agent: a section header of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("agent: the section's header: %w", err)
	}
	var h sectionHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("agent: the section's header: %w", err)
	}
	if h.Version < 1 || h.Version > HandoverVersion {
		return nil, fmt.Errorf("agent: a section of version %d, where this daemon reads 1 to %d", h.Version, HandoverVersion)
	}
	used := make([]bool, fds)
	take := func(i, k int) error {
		if i < 0 || k < 0 || k > fds || i > fds-k {
			return fmt.Errorf("agent: descriptors %d to %d of %d", i, i+k, fds)
		}
		for j := i; j < i+k; j++ {
			if used[j] {
				return fmt.Errorf("agent: descriptor %d named twice", j)
			}
			used[j] = true
		}
		return nil
	}
	if err := take(0, h.Listeners); err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(h.Namespaces))
	for _, ns := range h.Namespaces {
		if ns.ID == "" || ids[ns.ID] {
			return nil, fmt.Errorf("agent: a namespace without an id, or named twice: %q", ns.ID)
		}
		ids[ns.ID] = true
		if err := take(ns.FD, ns.FDs); err != nil {
			return nil, err
		}
		if ns.Init >= 0 {
			if err := take(ns.Init, 1); err != nil {
				return nil, err
			}
		} else if ns.PID <= 0 || ns.Start == "" {
			return nil, fmt.Errorf("agent: namespace %q names no init", ns.ID)
		}
	}
	return &h, nil
}

// frozen is a namespace frozen for a hand-over: its state, and the
// descriptors its Freeze returned (the agent's until the hand-over is
// decided).
type frozen struct {
	id    string
	ns    *namespace
	state []byte
	fds   []int
}

// HandOver writes the agent's section of a hand-over to w, once it has
// stopped accepting runtimes (those accepted are served first) and
// frozen every container's namespace; it returns the descriptors the
// section names (its own still) and done, which takes the hand-over's
// outcome: handed over, the containers are the next daemon's and their
// namespaces here go; otherwise each is made again from its frozen state
// and the agent serves on. It is server.Config.HandOverExtra for the
// daemon's Server.
func (a *Agent) HandOver(w io.Writer) (fds []int, done func(handedOver bool), err error) {
	if err := a.park(); err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	ids := make([]string, 0, len(a.nss))
	for id, ns := range a.nss {
		ids = append(ids, id)
		ns.frozen = true
	}
	slices.Sort(ids)
	nss := make([]*namespace, len(ids))
	for i, id := range ids {
		nss[i] = a.nss[id]
	}
	lns := slices.Clone(a.lns)
	a.mu.Unlock()
	var fz []frozen
	fail := func(err error) ([]int, func(bool), error) {
		a.resume(fz, false)
		return nil, nil, err
	}
	// Side by side: a namespace whose listener a caller holds in a call
	// makes the others wait no longer than itself. The collector waits
	// until all are written (as each Freeze would have it, which the
	// namespaces' Freezes, side by side, cannot each restore).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	type result struct {
		state []byte
		fds   []int
		err   error
	}
	results := make([]result, len(nss))
	var wg sync.WaitGroup
	for i, ns := range nss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b bytes.Buffer
			kept, err := ns.srv.Freeze(&b)
			if err != nil {
				clear(b.Bytes())
			}
			results[i] = result{b.Bytes(), kept, err}
		}()
	}
	wg.Wait()
	var ferr error
	for i, r := range results {
		if r.err != nil {
			// Freeze failed: it serves on, unless its last listener
			// ended meanwhile (leave left it to the hand-over).
			a.mu.Lock()
			nss[i].frozen = false
			orphan := nss[i].listeners == 0 && a.nss[ids[i]] == nss[i]
			if orphan {
				delete(a.nss, ids[i])
			}
			a.mu.Unlock()
			if orphan {
				nss[i].end()
			}
			ferr = errors.Join(ferr, fmt.Errorf("agent: freezing container %s: %w", ids[i], r.err))
			continue
		}
		fz = append(fz, frozen{id: ids[i], ns: nss[i], state: r.state, fds: r.fds})
	}
	if ferr != nil {
		return fail(ferr)
	}
	h := sectionHeader{Version: HandoverVersion}
	for _, ln := range lns {
		fd, err := listenerFD(ln)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, fd)
	}
	h.Listeners = len(fds)
	for _, f := range fz {
		rec := nsRecord{ID: f.id, Who: f.ns.who.Record(), Init: -1, FD: len(fds), FDs: len(f.fds)}
		fds = append(fds, f.fds...)
		if pfd := f.ns.init.Pidfd(); pfd >= 0 {
			rec.Init = len(fds)
			fds = append(fds, pfd)
		} else {
			rec.PID, rec.Start = f.ns.init.PID(), process.StartTime(f.ns.init.PID())
		}
		h.Namespaces = append(h.Namespaces, rec)
	}
	if err := writeHeader(w, &h); err != nil {
		return fail(err)
	}
	for _, f := range fz {
		if _, err := w.Write(f.state); err != nil {
			return fail(err)
		}
	}
	a.log.Info("ukeyd: seccomp agent: containers handed over", "containers", len(fz))
	return fds, func(ok bool) { a.resume(fz, ok) }, nil
}

// listenerFD returns the descriptor under ln, which stays ln's.
func listenerFD(ln *net.UnixListener) (int, error) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// park stops the accept loops (their sockets stay open: runtimes wait
// in the backlog) and waits until every runtime accepted has had its
// listener served or refused, for at most server.HandoverTimeout.
func (a *Agent) park() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing || a.handing {
		return errors.New("agent: closing, or handing over already")
	}
	a.handing = true
	for _, ln := range a.lns {
		ln.SetDeadline(time.Unix(1, 0)) // Serve's accept returns, and waits
	}
	t := time.AfterFunc(server.HandoverTimeout, func() {
		a.mu.Lock()
		a.timedOut = true
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer t.Stop()
	a.timedOut = false
	for (a.parked < a.serving || a.starting > 0) && !a.timedOut {
		a.cond.Wait()
	}
	if a.parked < a.serving || a.starting > 0 {
		a.resumeAcceptsLocked()
		return fmt.Errorf("agent: %d runtimes still handing in containers after %v", a.starting, server.HandoverTimeout)
	}
	return nil
}

// resumeAcceptsLocked lets the accept loops accept again. a.mu is held.
func (a *Agent) resumeAcceptsLocked() {
	for _, ln := range a.lns {
		ln.SetDeadline(time.Time{})
	}
	a.handing = false
	a.cond.Broadcast()
}

// resume ends a hand-over: handed over, the frozen namespaces and the
// listening sockets go (the next daemon has them: the sockets keep
// their names) and the agent is closing; otherwise each frozen namespace
// is made again from its state, and the agent accepts again.
func (a *Agent) resume(fz []frozen, handedOver bool) {
	if handedOver {
		a.mu.Lock()
		a.closing = true
		for _, f := range fz {
			if a.nss[f.id] == f.ns {
				delete(a.nss, f.id)
			}
		}
		for _, ln := range a.lns {
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
		a.handing = false
		a.cond.Broadcast()
		a.mu.Unlock()
		for _, f := range fz {
			clear(f.state)
			closeAll(f.fds)
			f.ns.end()
		}
		return
	}
	for _, f := range fz {
		ns, start, err := a.thawNamespace(bytes.NewReader(f.state), f.fds, f.ns.who, f.ns.init)
		clear(f.state)
		if err != nil {
			a.log.Warn("ukeyd: seccomp agent: a container could not be served again after a failed hand-over", "container", f.id, "err", err)
			a.mu.Lock()
			if a.nss[f.id] == f.ns {
				delete(a.nss, f.id)
			}
			a.mu.Unlock()
			f.ns.end()
			continue
		}
		// The old namespace's keys were released by its Freeze; its
		// init's handle is the new one's.
		f.ns.init = process.Handle{}
		f.ns.end()
		a.adopt(f.id, ns, start)
	}
	a.mu.Lock()
	a.resumeAcceptsLocked()
	a.mu.Unlock()
}

// end lets go of a namespace that is no container's any more: its
// server, keys, share of the bounds and init's handle.
func (ns *namespace) end() {
	ns.srv.Shutdown(context.Background())
	ns.svc.Close()
	ns.share.Detach()
	ns.init.Close()
}

// thawNamespace makes a container's namespace again from its Server's
// frozen state (r, fds: taken), with a fresh share of the agent's
// bounds, not yet serving (start).
func (a *Agent) thawNamespace(r io.Reader, fds []int, who container.Identity, init process.Handle) (*namespace, func(bool) []<-chan struct{}, error) {
	ctr, uid := Share(a.bounds)
	share := keys.NewShare(a.keys, keys.ShareLimits{Keys: ctr.Keys, Bytes: ctr.Bytes,
		BigKeyFiles: ctr.BigKeyFiles, BigKeyFilesPerUID: uid.BigKeyFiles})
	opts := append(slices.Clone(a.cfg.Keys), keys.WithShare(share))
	res, start, err := server.ThawHeld(r, fds, opts, a.serverConfig(who, ctr, uid))
	if err != nil {
		share.Detach()
		return nil, nil, err
	}
	ns := &namespace{svc: res.Service, srv: res.Server, who: who, init: init, share: share}
	return ns, func(serve bool) []<-chan struct{} {
		start(serve)
		if !serve {
			res.Service.Close()
			share.Detach()
			return nil
		}
		return res.Seccomp
	}, nil
}

// adopt makes ns container id's namespace, serving the listeners start
// serves; it ends with the last of them, as one a runtime handed in.
func (a *Agent) adopt(id string, ns *namespace, start func(bool) []<-chan struct{}) {
	served := start(true)
	a.mu.Lock()
	if old := a.nss[id]; old != nil && old != ns && !old.frozen {
		// Cannot happen: a restored id is no other container's. Kept
		// apart all the same.
		a.mu.Unlock()
		a.log.Warn("ukeyd: seccomp agent: a container handed over under an id in use", "container", id)
		ns.srv.Shutdown(context.Background())
		ns.svc.Close()
		ns.share.Detach()
		return
	}
	a.nss[id] = ns
	ns.listeners = len(served)
	for _, ch := range served {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			<-ch
			a.leave(id, ns)
		}()
	}
	a.mu.Unlock()
	if len(served) == 0 {
		a.mu.Lock()
		ns.listeners = 1
		a.mu.Unlock()
		a.leave(id, ns) // nothing left to serve: its keys go
	}
}

// TakeOver reads the agent's section of a hand-over (what HandOver
// wrote) with its descriptors (taken), and returns start, which serves
// the containers (serve: the old daemon has let go) or drops them. It is
// server.Config.TakeOverExtra for the new daemon's Server. A container
// whose init has exited, or is not in the namespaces its record names,
// is not served (its listeners close: its calls fail, as a dead
// container's do). The agent's listening sockets handed over are for
// Listeners, to Serve.
func (a *Agent) TakeOver(r io.Reader, fds []int) (start func(serve bool), err error) {
	defer func() { closeAll(fds) }()
	h, err := readHeader(r, len(fds))
	if err != nil {
		return nil, err
	}
	var lns []*net.UnixListener
	type restored struct {
		id    string
		ns    *namespace
		start func(bool) []<-chan struct{}
	}
	var made []restored
	drop := func() {
		for _, m := range made {
			m.start(false)
			m.ns.init.Close()
		}
		for _, ln := range lns {
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
	}
	for i := range h.Listeners {
		ln, err := listenerFrom(fds[i])
		fds[i] = -1
		if err != nil {
			drop()
			return nil, err
		}
		lns = append(lns, ln)
	}
	for _, rec := range h.Namespaces {
		var init process.Handle
		var ierr error
		if rec.Init >= 0 {
			init, ierr = process.Adopt(fds[rec.Init])
			fds[rec.Init] = -1
		} else if hh, ok := process.OpenPID(rec.PID, rec.Start); ok {
			init = hh
		} else {
			ierr = errors.New("the container's init has exited")
		}
		var who container.Identity
		if ierr == nil {
			who, ierr = container.Rebind(rec.Who, &init)
		}
		nsFDs := slices.Clone(fds[rec.FD : rec.FD+rec.FDs])
		for j := rec.FD; j < rec.FD+rec.FDs; j++ {
			fds[j] = -1
		}
		// Its state is read whatever becomes of it: the next follows.
		ns, nsStart, err := a.thawNamespace(r, nsFDs, who, init)
		if err != nil {
			init.Close()
			drop()
			return nil, fmt.Errorf("agent: container %s: %w", rec.ID, err)
		}
		if ierr != nil {
			a.log.Warn("ukeyd: seccomp agent: a container handed over is not served", "container", rec.ID, "reason", ierr.Error())
			nsStart(false)
			init.Close()
			continue
		}
		made = append(made, restored{id: rec.ID, ns: ns, start: nsStart})
	}
	return func(serve bool) {
		if !serve {
			drop()
			return
		}
		a.mu.Lock()
		a.taken = append(a.taken, lns...)
		a.mu.Unlock()
		for _, m := range made {
			a.adopt(m.id, m.ns, m.start)
		}
		a.log.Info("ukeyd: seccomp agent: containers taken over", "containers", len(made), "sockets", len(lns))
	}, nil
}

// Listeners returns the listening sockets a hand-over gave the agent
// (TakeOver), for the caller to Serve; none if it made its own.
func (a *Agent) Listeners() []*net.UnixListener {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.taken)
}

// listenerFrom makes a listener of a descriptor handed over (taken).
func listenerFrom(fd int) (*net.UnixListener, error) {
	if fd < 0 {
		return nil, errors.New("agent: a listening socket did not come")
	}
	f := os.NewFile(uintptr(fd), "agent-listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	u, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("agent: a listener of type %T handed over", ln)
	}
	// It removes the socket's name when it closes, as one made by
	// server.Listen does.
	u.SetUnlinkOnClose(true)
	return u, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
