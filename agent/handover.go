package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// An agent's containers go with the daemon's own hand-over (ukeyd
// -takeover) and with its restart through systemd's file-descriptor
// store (server.Server.Freeze, server.Thaw): the daemon's Server carries
// the agent's section after its own state (server.Config.HandOverExtra
// and TakeOverExtra, which HandOver and TakeOver are). The section
// holds the agent's listening sockets and, for each key namespace (a
// container's, or a pod's), its pod's sandbox id and binding (the IPC or
// network namespace it holds open, sent as a descriptor and checked
// again by the next daemon), its members (each container's id, its
// identity, a pidfd of its init, by which the next daemon binds the id
// to the same container whatever became of the init's pid, and the tag
// of its listeners, so that each container still leaves with its own
// last listener), and its Server's own frozen state: its keys,
// processes, threads, seccomp listeners (detached between two calls: a
// call made meanwhile waits in its caller) and notification pipes.
// Runtimes that connect meanwhile wait in the socket's backlog; one
// accepted already is served before the containers are frozen.
//
// The section is:
//
//	uint32 big-endian n, then n bytes of JSON: sectionHeader
//	then each namespace's frozen state, in the header's order
//	(self-delimiting: server.Thaw reads exactly its own)

// HandoverVersion is the version of the agent's section. A daemon reads
// every earlier version and refuses a later one. Version 1 had a
// container per namespace (no pods); 2 has a namespace's members, its
// sandbox and its pod's binding.
const HandoverVersion = 2

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

// nsRecord is one key namespace. Its Server's descriptors are FDs of
// the section's, from the FDth. A pod's (Sandbox) has Pod, its binding;
// a container's own has one member.
type nsRecord struct {
	FD      int            `json:"fd"`
	FDs     int            `json:"fds"`
	Sandbox string         `json:"sandbox,omitempty"`
	Pod     *podRecord     `json:"pod,omitempty"`
	Members []memberRecord `json:"members"`
	// Calls and Refusals are its counts so far (Agent.Namespaces), which
	// its metrics go on from.
	Calls    uint64 `json:"calls,omitempty"`
	Refusals uint64 `json:"refusals,omitempty"`
}

// podRecord is a pod's binding: the namespace that pins it is the FDth
// descriptor of the section's.
type podRecord struct {
	container.PodRecord
	FD int `json:"fd"`
}

// memberRecord is one container of a namespace. Init is the index of
// its init's pidfd (-1: none, the init is then known by PID and Start);
// Tag names its listeners in the Server's state; Listeners is how many
// it counted. A Gone one's init has exited (its id may be a new
// container's): it is no container's any more, and leaves with its
// listeners.
type memberRecord struct {
	ID        string           `json:"id"`
	Who       container.Record `json:"who"`
	Init      int              `json:"init"`
	PID       int              `json:"pid,omitempty"`
	Start     string           `json:"start,omitempty"`
	Tag       string           `json:"tag,omitempty"`
	Listeners int              `json:"listeners,omitempty"`
	Gone      bool             `json:"gone,omitempty"`
}

// sectionHeaderV1 is a version 1 header: a record per container, each
// its own namespace, its listeners untagged.
type sectionHeaderV1 struct {
	Listeners  int `json:"listeners"`
	Namespaces []struct {
		memberRecord
		FD  int `json:"fd"`
		FDs int `json:"fds"`
	} `json:"namespaces"`
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

// readHeader reads the section's header (a version 1 one as version 2
// says it) and checks it against the fds descriptors that came with it:
// every index in range, none used twice, the version one this daemon
// reads, no container nor sandbox named twice.
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
	if h.Version == 1 {
		var v1 sectionHeaderV1
		if err := json.Unmarshal(b, &v1); err != nil {
			return nil, fmt.Errorf("agent: the section's header: %w", err)
		}
		h = sectionHeader{Version: 1, Listeners: v1.Listeners}
		for _, ns := range v1.Namespaces {
			m := ns.memberRecord
			m.Tag, m.Listeners, m.Gone = "", 0, false
			h.Namespaces = append(h.Namespaces, nsRecord{FD: ns.FD, FDs: ns.FDs, Members: []memberRecord{m}})
		}
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
	ids := make(map[string]bool)
	sandboxes := make(map[string]bool)
	for _, ns := range h.Namespaces {
		if err := take(ns.FD, ns.FDs); err != nil {
			return nil, err
		}
		switch {
		case (ns.Sandbox == "") != (ns.Pod == nil):
			return nil, fmt.Errorf("agent: a namespace with a sandbox %q and no pod, or a pod and no sandbox", ns.Sandbox)
		case ns.Sandbox != "" && sandboxes[ns.Sandbox]:
			return nil, fmt.Errorf("agent: sandbox %q named twice", ns.Sandbox)
		case len(ns.Members) == 0 || ns.Sandbox == "" && len(ns.Members) > 1:
			return nil, fmt.Errorf("agent: a namespace of %d containers, sandbox %q", len(ns.Members), ns.Sandbox)
		}
		if ns.Pod != nil {
			sandboxes[ns.Sandbox] = true
			if err := take(ns.Pod.FD, 1); err != nil {
				return nil, err
			}
		}
		tags := make(map[string]bool, len(ns.Members))
		for _, m := range ns.Members {
			if m.ID == "" || !m.Gone && ids[m.ID] {
				return nil, fmt.Errorf("agent: a container without an id, or named twice: %q", m.ID)
			}
			if m.Tag != "" && tags[m.Tag] || m.Tag == "" && len(ns.Members) > 1 {
				return nil, fmt.Errorf("agent: container %q: its listeners' tag %q is none or another's", m.ID, m.Tag)
			}
			tags[m.Tag] = true
			if m.Gone {
				if m.Init != -1 {
					return nil, fmt.Errorf("agent: container %q, gone, names an init", m.ID)
				}
				continue
			}
			ids[m.ID] = true
			if m.Init >= 0 {
				if err := take(m.Init, 1); err != nil {
					return nil, err
				}
			} else if m.PID <= 0 || m.Start == "" {
				return nil, fmt.Errorf("agent: container %q names no init", m.ID)
			}
		}
	}
	return &h, nil
}

// frozen is a namespace frozen for a hand-over: its state, and the
// descriptors its Freeze returned (the agent's until the hand-over is
// decided); members are its containers, listeners what each counted
// when it was frozen.
type frozen struct {
	ns        *namespace
	members   []*member
	listeners []int
	state     []byte
	fds       []int
}

// nsName names a namespace in logs and orders them: its sandbox, or its
// container's id.
func (ns *namespace) name() string {
	if ns.sandbox != "" || len(ns.members) == 0 {
		return ns.sandbox
	}
	return ns.members[0].id
}

// HandOver writes the agent's section of a hand-over to w, once it has
// stopped accepting runtimes (those accepted are served first) and
// frozen every namespace; it returns the descriptors the section names
// (its own still) and done, which takes the hand-over's outcome: handed
// over, the containers are the next daemon's and their namespaces here
// go; otherwise each is made again from its frozen state and the agent
// serves on. It is server.Config.HandOverExtra for the daemon's Server.
func (a *Agent) HandOver(w io.Writer) (fds []int, done func(handedOver bool), err error) {
	if err := a.park(); err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	nss := slices.Collect(maps.Keys(a.nss))
	slices.SortFunc(nss, func(x, y *namespace) int { return strings.Compare(x.name(), y.name()) })
	all := make([]frozen, len(nss))
	for i, ns := range nss {
		ns.frozen = true
		all[i] = frozen{ns: ns, members: slices.Clone(ns.members)}
		for _, m := range ns.members {
			all[i].listeners = append(all[i].listeners, m.listeners)
		}
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
			// Freeze failed: it serves on, but for the containers whose
			// last listener ended meanwhile (leave left them to the
			// hand-over).
			a.thawFailed(nss[i])
			ferr = errors.Join(ferr, fmt.Errorf("agent: freezing namespace %s: %w", nss[i].name(), r.err))
			continue
		}
		f := all[i]
		f.state, f.fds = r.state, r.fds
		fz = append(fz, f)
	}
	if ferr != nil {
		return fail(ferr)
	}
	h := sectionHeader{Version: HandoverVersion}
	for _, ln := range lns {
		fd, err := sock.FD(ln)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, fd)
	}
	h.Listeners = len(fds)
	a.mu.Lock()
	for _, f := range fz {
		rec := nsRecord{FD: len(fds), FDs: len(f.fds), Sandbox: f.ns.sandbox, Calls: f.ns.calls.Load(), Refusals: f.ns.refusals.Load()}
		fds = append(fds, f.fds...)
		if f.ns.sandbox != "" {
			pr, pfd := f.ns.bind.Record()
			if pfd < 0 {
				a.mu.Unlock()
				return fail(fmt.Errorf("agent: pod %s is bound to no namespace", f.ns.sandbox))
			}
			rec.Pod = &podRecord{PodRecord: pr, FD: len(fds)}
			fds = append(fds, pfd)
		}
		for j, m := range f.members {
			mr := memberRecord{ID: m.id, Tag: m.tag, Listeners: f.listeners[j], Init: -1}
			switch {
			case m.ghost || a.ctrs[m.id] != m:
				mr.Gone = true
			case m.init.Pidfd() >= 0:
				mr.Who, mr.Init = m.who.Record(), len(fds)
				fds = append(fds, m.init.Pidfd())
			default:
				mr.Who, mr.PID, mr.Start = m.who.Record(), m.init.PID(), process.StartTime(m.init.PID())
			}
			rec.Members = append(rec.Members, mr)
		}
		h.Namespaces = append(h.Namespaces, rec)
	}
	a.mu.Unlock()
	if err := writeHeader(w, &h); err != nil {
		return fail(err)
	}
	for _, f := range fz {
		if _, err := w.Write(f.state); err != nil {
			return fail(err)
		}
	}
	a.log.Info("ukeyd: seccomp agent: containers handed over", "namespaces", len(fz))
	return fds, func(ok bool) { a.resume(fz, ok) }, nil
}

// thawFailed lets ns, frozen, serve on: its containers whose last
// listener ended while it was frozen leave it now, as leave would have
// had them.
func (a *Agent) thawFailed(ns *namespace) {
	a.mu.Lock()
	ns.frozen = false
	var left []*member
	var lasts []bool
	for _, m := range slices.Clone(ns.members) {
		if m.listeners <= 0 {
			left = append(left, m)
			lasts = append(lasts, a.dropLocked(m))
		}
	}
	a.mu.Unlock()
	for i, m := range left {
		a.gone(m, lasts[i])
	}
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
			a.forgetLocked(f.ns)
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
			for _, m := range f.members {
				m.init.Close()
			}
		}
		return
	}
	for _, f := range fz {
		specs := make([]*member, len(f.members))
		for i, m := range f.members {
			specs[i] = &member{id: m.id, who: m.who, init: m.init, tag: m.tag, ghost: m.ghost}
		}
		ns, start, err := a.thawNamespace(bytes.NewReader(f.state), f.fds, f.ns.sandbox, f.ns.bind, specs)
		clear(f.state)
		a.mu.Lock()
		a.forgetLocked(f.ns)
		a.mu.Unlock()
		if err != nil {
			a.log.Warn("ukeyd: seccomp agent: a namespace could not be served again after a failed hand-over", "namespace", f.ns.name(), "err", err)
			f.ns.end()
			for _, m := range f.members {
				m.init.Close()
			}
			continue
		}
		// The old namespace's keys were released by its Freeze; its
		// inits' handles and its pod's binding are the new one's.
		f.ns.bind = container.Pod{}
		f.ns.end()
		a.adopt(ns, start)
	}
	a.mu.Lock()
	a.resumeAcceptsLocked()
	a.mu.Unlock()
}

// forgetLocked takes ns, frozen, and its containers out of the agent's
// maps, where they are still its; a.mu is held.
func (a *Agent) forgetLocked(ns *namespace) {
	for _, m := range ns.members {
		if a.ctrs[m.id] == m {
			delete(a.ctrs, m.id)
		}
	}
	if ns.sandbox != "" && a.pods[ns.sandbox] == ns {
		delete(a.pods, ns.sandbox)
	}
	delete(a.nss, ns)
}

// end lets go of a namespace that is no container's any more: its
// server, keys, hold on the agent's commons, share of the bounds and
// pod's binding (its members' inits are theirs).
func (ns *namespace) end() {
	ns.srv.Shutdown(context.Background())
	ns.svc.Close()
	if ns.letGo != nil {
		ns.letGo()
	}
	ns.share.Detach()
	ns.bind.Close()
}

// thawed starts (serve) or drops what thawNamespace made, returning the
// listeners it serves and their tags.
type thawed func(serve bool) (served []<-chan struct{}, tags []string)

// thawNamespace makes a namespace again from its Server's frozen state
// (r, fds: taken), with a fresh share of the agent's bounds, its pod's
// binding and its members (whose inits it takes), not yet serving
// (start). On an error, bind and the members' inits are the caller's.
func (a *Agent) thawNamespace(r io.Reader, fds []int, sandbox string, bind container.Pod, members []*member) (*namespace, thawed, error) {
	ctr, uid := Share(a.bounds)
	share := keys.NewShare(a.keys, keys.ShareLimits{Keys: ctr.Keys, Bytes: ctr.Bytes,
		BigKeyFiles: ctr.BigKeyFiles, BigKeyFilesPerUID: uid.BigKeyFiles})
	ns := &namespace{share: share, sandbox: sandbox, bind: bind, members: members}
	for _, m := range members {
		m.ns = ns
	}
	ns.setMembers()
	shared, release := a.commons.acquire()
	opts := append(slices.Concat(a.cfg.Keys, shared), keys.WithShare(share))
	res, start, err := server.ThawHeld(r, fds, opts, a.serverConfig(ns, ctr, uid))
	if err != nil {
		release() // its Service closed already
		share.Detach()
		return nil, nil, err
	}
	ns.svc, ns.srv, ns.letGo = res.Service, res.Server, release
	return ns, func(serve bool) ([]<-chan struct{}, []string) {
		start(serve)
		if !serve {
			res.Service.Close()
			release()
			share.Detach()
			return nil, nil
		}
		return res.Seccomp, res.SeccompTags
	}, nil
}

// adopt makes ns, thawed, one of the agent's, serving the listeners
// start serves, each counted to the member its tag names: a member
// leaves with the last of its own, and the namespace with its last
// member, as one a runtime handed in. A container id or a sandbox that
// is another's here already (which a hand-over never makes) is not
// taken: the member is a ghost, the pod not found by its sandbox.
func (a *Agent) adopt(ns *namespace, start thawed) {
	served, tags := start(true)
	a.mu.Lock()
	for _, m := range ns.members {
		if m.ghost {
			continue
		}
		if old := a.ctrs[m.id]; old != nil && !old.ns.frozen {
			a.log.Warn("ukeyd: seccomp agent: a container handed over under an id in use", "container", m.id)
			m.ghost = true
			continue
		}
		a.ctrs[m.id] = m
	}
	if ns.sandbox != "" {
		if old := a.pods[ns.sandbox]; old != nil && !old.frozen {
			a.log.Warn("ukeyd: seccomp agent: a pod handed over under a sandbox id in use", "pod", ns.sandbox)
		} else {
			a.pods[ns.sandbox] = ns
		}
	}
	a.nss[ns] = true
	ns.setMembers()
	byTag := make(map[string]*member, len(ns.members))
	for _, m := range ns.members {
		byTag[m.tag] = m
	}
	for i, ch := range served {
		m := byTag[tags[i]]
		if m == nil {
			// Untagged (a version 1 section: one container) or another's
			// tag: counted to the first container, which the namespace
			// then outlives no less.
			m = ns.members[0]
		}
		m.listeners++
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			<-ch
			a.leave(m)
		}()
	}
	// A container none of whose listeners came (held in a call past the
	// hand-over's deadline) has nothing left to serve: it leaves.
	var left []*member
	var lasts []bool
	for _, m := range slices.Clone(ns.members) {
		if m.listeners == 0 {
			left = append(left, m)
			lasts = append(lasts, a.dropLocked(m))
		}
	}
	a.mu.Unlock()
	for i, m := range left {
		a.gone(m, lasts[i])
	}
}

// TakeOver reads the agent's section of a hand-over (what HandOver
// wrote) with its descriptors (taken), and returns start, which serves
// the containers (serve: the old daemon has let go) or drops them. It is
// server.Config.TakeOverExtra for the new daemon's Server. A container
// whose init has exited, or is not in the namespaces its record names,
// or not in its pod's IPC and network namespaces (whose binding is
// checked again), is a ghost: its processes are not served, and it
// leaves with its listeners; a namespace of ghosts only is not served
// at all (its listeners close: its calls fail, as a dead container's
// do). The agent's listening sockets handed over are for Listeners, to
// Serve.
func (a *Agent) TakeOver(r io.Reader, fds []int) (start func(serve bool), err error) {
	defer func() { closeAll(fds) }()
	h, err := readHeader(r, len(fds))
	if err != nil {
		return nil, err
	}
	var lns []*net.UnixListener
	type restored struct {
		ns    *namespace
		start thawed
	}
	var made []restored
	drop := func() {
		for _, m := range made {
			m.start(false)
			m.ns.release()
		}
		for _, ln := range lns {
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
	}
	for i := range h.Listeners {
		ln, err := server.ListenerFrom(fds[i])
		fds[i] = -1
		if err != nil {
			drop()
			return nil, err
		}
		lns = append(lns, ln)
	}
	for _, rec := range h.Namespaces {
		sandbox := rec.Sandbox
		var bind container.Pod
		var berr error
		if rec.Pod != nil {
			bind, berr = container.RebindPod(rec.Pod.PodRecord, fds[rec.Pod.FD])
			fds[rec.Pod.FD] = -1
			if berr != nil {
				berr = fmt.Errorf("pod %s: %w", sandbox, berr)
				sandbox = ""
			}
		}
		var members []*member
		live := 0
		for _, mr := range rec.Members {
			m := &member{id: mr.ID, tag: mr.Tag, ghost: true}
			members = append(members, m)
			if mr.Gone {
				continue
			}
			ierr := berr
			if mr.Init >= 0 {
				var err error
				m.init, err = process.Adopt(fds[mr.Init])
				fds[mr.Init] = -1
				ierr = cmp.Or(ierr, err)
			} else if hh, ok := process.OpenPID(mr.PID, mr.Start); ok {
				m.init = hh
			} else {
				ierr = cmp.Or(ierr, errors.New("the container's init has exited"))
			}
			if ierr == nil {
				m.who, ierr = container.Rebind(mr.Who, &m.init)
			}
			if ierr == nil && rec.Pod != nil {
				ierr = inPod(&m.init, bind)
			}
			if ierr != nil {
				a.log.Warn("ukeyd: seccomp agent: a container handed over is not served", "container", mr.ID, "pod", rec.Sandbox, "reason", ierr.Error())
				m.init.Close()
				m.init = process.Handle{}
				continue
			}
			m.ghost = false
			live++
		}
		nsFDs := slices.Clone(fds[rec.FD : rec.FD+rec.FDs])
		for j := rec.FD; j < rec.FD+rec.FDs; j++ {
			fds[j] = -1
		}
		// Its state is read whatever becomes of it: the next follows.
		ns, nsStart, err := a.thawNamespace(r, nsFDs, sandbox, bind, members)
		if err != nil {
			(&namespace{bind: bind, members: members}).release()
			drop()
			return nil, fmt.Errorf("agent: namespace %s: %w", cmp.Or(rec.Sandbox, rec.Members[0].ID), err)
		}
		ns.calls.Store(rec.Calls)
		ns.refusals.Store(rec.Refusals)
		if live == 0 {
			nsStart(false)
			ns.release()
			continue
		}
		made = append(made, restored{ns: ns, start: nsStart})
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
			a.adopt(m.ns, m.start)
		}
		a.log.Info("ukeyd: seccomp agent: containers taken over", "namespaces", len(made), "sockets", len(lns))
	}, nil
}

// inPod says why the container whose init is init is not in pod's IPC
// and network namespaces (nil if it is), read while the init lives.
func inPod(init *process.Handle, pod container.Pod) error {
	p, err := container.PodOf(init)
	if err != nil {
		return err
	}
	defer p.Close()
	if !p.Same(pod) {
		return errors.New("the container is not in its pod's IPC and network namespaces")
	}
	return nil
}

// release lets go of what a namespace never served holds: its pod's
// binding and its members' inits.
func (ns *namespace) release() {
	ns.bind.Close()
	for _, m := range ns.members {
		m.init.Close()
	}
}

// Listeners returns the listening sockets a hand-over gave the agent
// (TakeOver), for the caller to Serve; none if it made its own.
func (a *Agent) Listeners() []*net.UnixListener {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.taken)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
