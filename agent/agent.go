package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/internal/peer"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/ratelimit"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// An Agent is a seccomp agent as the OCI runtime specification defines
// it (linux.seccomp.listenerPath): a container runtime (runc, crun)
// connects to its socket and sends the container's seccomp listener with
// the container's [ContainerProcessState], and the agent serves the
// add_key, keyctl and request_key calls of the container's processes.
// Each container is a key namespace of its own, or, under a CRI runtime
// (containerd, CRI-O), each pod: a [keys.Service] and a [server.Server]
// of its own, so that no key, keyring, persistent keyring or quota of one
// container or pod is visible to or charged to another (what the
// kernel's keyrings lack, and why runtimes forbid those calls). A
// namespace's keys are destroyed when its last process has exited (its
// last listener has no task left): a pod's, when the last of its
// containers has.
//
// A container's id is no identity by itself: only the agent's equal may
// hand in a container (judge), and an id is bound to the container's
// own processes, its pid namespace (or mount namespace, for a container
// that shares the host's pids), read from the process the runtime's
// state names ([container.Of]). A namespace serves no process outside them.
// A pod's sandbox id, read from the state's annotations, is no identity
// either: a pod's namespace is bound to the IPC and network namespaces
// its containers share ([container.PodOf]), and a container that names
// the pod's sandbox from other namespaces is refused.
type Agent struct {
	cfg Config
	log *slog.Logger

	// refusals throttles the log lines of refused runtimes, as the
	// daemon's socket's are: the agent's socket is open to every user,
	// and each refusal would otherwise be a line.
	refusals ratelimit.Limiter

	// bounds are the containers' bounds together ([Bounds]); procs and
	// keys count what every container's namespace holds of them.
	bounds Bounds
	procs  *server.Pool
	keys   *keys.Share
	// heavy is the one bound of expensive operations running, for every
	// container's Server (and the host's, given in Config.Server).
	heavy *server.Slots
	// commons are the rcu domain and collectors' queue every namespace
	// shares (commons.go).
	commons commons

	mu sync.Mutex
	// ctrs are the containers served, by id; pods the namespaces of
	// pods, by sandbox id; nss every namespace (a container whose id a
	// new one has taken keeps its own until its last listener ends).
	ctrs    map[string]*member
	pods    map[string]*namespace
	nss     map[*namespace]bool
	lns     []*net.UnixListener
	closing bool
	wg      sync.WaitGroup
	// A hand-over (handover.go) parks the accept loops (serving counts
	// them, parked those waiting) once every runtime accepted has its
	// listener served or refused (starting counts them); taken are the
	// listening sockets a hand-over gave this agent.
	cond                      sync.Cond
	handing, timedOut         bool
	serving, parked, starting int
	taken                     []*net.UnixListener
}

// Config configures an [Agent]: what each container's key namespace is
// made with.
type Config struct {
	Logger *slog.Logger
	Keys   []keys.Option // for each container's keys.Service
	// Server is what each container's Server is made with, within the
	// container's share of Bounds, without logins (a container has no
	// login). Its Expensive, if set, are the daemon's slots (given to
	// the daemon's own Server too): the containers' expensive operations
	// (signature checks, dh_compute, pkey_*) then take their slots from
	// the daemon's bound, so that the processors it leaves free stay
	// free whoever calls. Without them the containers share one bound
	// of their own, Limits.MaxExpensive. Its Member and Pool are the
	// agent's to set.
	Server server.Config
	// MaxContainers bounds the containers whose key namespaces the agent
	// holds at once (0: DefaultMaxContainers); a runtime handing in one
	// more is refused.
	MaxContainers int
	// Bounds are what every container's namespace together may hold of
	// the daemon's resources; each container gets an eighth of each, and
	// each uid in a container an eighth of its container's (see
	// [Bounds] and [Share]).
	Bounds Bounds
}

// Bounds are what the containers' key namespaces may hold
// together of what belongs to the one daemon process, whichever of them
// holds it: big_key files, descriptors and memory are the process's, so
// that a namespace with fresh bounds and quotas of its own would let one
// container's root fill every big_key file of the daemon, and every
// other container and every host user get EMFILE. Zero fields take the
// defaults said of each.
type Bounds struct {
	// Procs bounds the processes and listeners the containers' Servers
	// keep (a descriptor or more each); default half of
	// Config.Server.Limits' MaxProcs (ukeyd takes it out of the host's).
	Procs int
	// BigKeyFiles bounds the containers' big_key payload files; default
	// half of Config.Server.Limits' BigKeyFiles, the process's bound, so
	// that the host's users keep the other half whatever the containers
	// hold.
	BigKeyFiles int
	// Keys and Bytes bound the keys and bytes charged to the quotas of
	// every container's owners together; default root's quota
	// (RootMaxKeys, RootMaxBytes) of the tunables the namespaces are made
	// with.
	Keys, Bytes int
}

// containerShare is the fraction of each of the agent's bounds one
// container may hold, and of a container's that one uid in it may: so
// that eight containers are needed to fill the agent, and eight uids to
// fill a container (as eight uids are needed to fill the daemon).
const containerShare = 8

// namespace is one key namespace: a container's, or a pod's containers'.
type namespace struct {
	svc *keys.Service
	srv *server.Server
	// share is what its keys hold of the agent's bounds, given back
	// whole when the namespace ends (keys.Share.Detach).
	share *keys.Share
	// letGo lets go of the agent's commons once svc is closed.
	letGo func()
	// sandbox is the pod's sandbox id ("" for a container's own
	// namespace), bind the namespaces its containers share, held open
	// while the namespace lives.
	sandbox string
	bind    container.Pod
	// members are the containers in it (a.mu held); whos their
	// identities, which its Server serves (server.Config.Member).
	members []*member
	whos    atomic.Pointer[[]container.Identity]
	// frozen: a hand-over has (or is taking) it; its members' last
	// listeners' ends do not take them out of it, nor end it: the
	// hand-over decides (handover.go).
	frozen bool
	// calls and refusals count the intercepted calls it has served and
	// those refused (nsObserver), for its status and metrics.
	calls, refusals atomic.Uint64
}

// member is one container the agent serves.
type member struct {
	ns        *namespace
	id        string
	listeners int
	// who is the container's identity, recorded from its first
	// listener's state; init a handle of its init, for as long as the
	// container is served: once it has exited, the id may be a new
	// container's.
	who  container.Identity
	init process.Handle
	// tag names its listeners in its Server, which a hand-over carries
	// with each (server.Server.StartListener): random, so that a new
	// container of a reused id is not taken for the old.
	tag string
	// ghost: a container handed over that could not be bound again (its
	// init gone, or out of its pod): its identity is not served, and it
	// is no container's id; it leaves with its listeners (handover.go).
	ghost bool
}

// setMembers records ns's members' identities for its Server; a.mu is
// held.
func (ns *namespace) setMembers() {
	whos := make([]container.Identity, 0, len(ns.members))
	for _, m := range ns.members {
		if !m.ghost {
			whos = append(whos, m.who)
		}
	}
	ns.whos.Store(&whos)
}

// NotifyMetadata is the word a seccomp profile's listenerMetadata
// carries when the profile hands the agent, beside the key calls, a
// pipe2 that asks for a notification pipe and the watch queue's ioctls
// (as intercept.Filter does): the agent then serves the container's
// key notifications ([server.Server.ServeNotifyListener]), and says so
// in KEYCTL_CAPABILITIES.
const NotifyMetadata = "ukeys:notify"

// PerContainerMetadata is the word a seccomp profile's listenerMetadata
// carries for a container of a pod that is to have a key namespace of
// its own rather than its pod's. The profile is what a pod's author
// chooses for each container (securityContext.seccompProfile), and the
// runtime hands its metadata over whatever its configuration; a pod's
// annotations reach the state only where the node lets them through.
const PerContainerMetadata = "ukeys:per-container"

// The annotations of the OCI state by which a CRI runtime says which pod
// sandbox a container belongs to, and whether it is the sandbox's own
// (pause) container.
const (
	// containerd's CRI plugin.
	annotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	annotationContainerType = "io.kubernetes.cri.container-type"
	// CRI-O.
	annotationCRIOSandboxID     = "io.kubernetes.cri-o.SandboxID"
	annotationCRIOContainerType = "io.kubernetes.cri-o.ContainerType"
)

// sandboxOf returns the id of the pod sandbox the state's annotations
// put the container in ("" if none: not a CRI runtime's).
func sandboxOf(st *ContainerProcessState) string {
	an := st.State.Annotations
	for _, k := range []string{annotationSandboxID, annotationCRIOSandboxID} {
		if id := an[k]; id != "" {
			return id
		}
	}
	if an[annotationContainerType] == "sandbox" || an[annotationCRIOContainerType] == "sandbox" {
		return st.State.ID
	}
	return ""
}

// ContainerProcessState is what a runtime sends with the listener
// (runtime-spec, config-linux.md, "Container Process State").
type ContainerProcessState struct {
	OCIVersion string   `json:"ociVersion"`
	FDs        []string `json:"fds"`
	Pid        int      `json:"pid"`
	Metadata   string   `json:"metadata"`
	State      struct {
		OCIVersion  string            `json:"ociVersion"`
		ID          string            `json:"id"`
		Status      string            `json:"status"`
		Pid         int               `json:"pid,omitempty"`
		Bundle      string            `json:"bundle"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"state"`
}

// New returns an agent that makes each container's namespace with cfg.
func New(cfg Config) *Agent {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Server.Logger == nil {
		cfg.Server.Logger = log
	}
	a := &Agent{cfg: cfg, log: log, ctrs: make(map[string]*member), pods: make(map[string]*namespace), nss: make(map[*namespace]bool),
		refusals: ratelimit.Limiter{Interval: 10 * time.Second, Burst: 5}}
	a.cond.L = &a.mu
	lim := cfg.Server.Limits.WithDefaults()
	tun := keys.New(cfg.Keys...)
	t := tun.Tunables()
	tun.Close()
	b := cfg.Bounds
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = max(def, 1)
		}
	}
	fill(&b.Procs, lim.MaxProcs/2)
	fill(&b.BigKeyFiles, lim.BigKeyFiles/2)
	fill(&b.Keys, t.RootMaxKeys)
	fill(&b.Bytes, t.RootMaxBytes)
	a.bounds = b
	a.procs = server.NewPool(b.Procs)
	if a.heavy = cfg.Server.Expensive; a.heavy == nil {
		a.heavy = server.NewSlots(lim.MaxExpensive)
	}
	a.keys = keys.NewShare(nil, keys.ShareLimits{Keys: b.Keys, Bytes: b.Bytes, BigKeyFiles: b.BigKeyFiles})
	return a
}

// Bounds returns the agent's bounds, defaults filled in.
func (a *Agent) Bounds() Bounds { return a.bounds }

// Share is one container's share of the agent's bounds b, and perUID the
// share of one uid in a container.
func Share(b Bounds) (container, perUID Bounds) {
	share := func(v int) int { return max(v/containerShare, 1) }
	container = Bounds{Procs: max(b.Procs/containerShare, 2), BigKeyFiles: share(b.BigKeyFiles),
		Keys: share(b.Keys), Bytes: share(b.Bytes)}
	perUID = Bounds{Procs: max(container.Procs/containerShare, 2), BigKeyFiles: share(container.BigKeyFiles),
		Keys: share(container.Keys), Bytes: share(container.Bytes)}
	return container, perUID
}

// logRefusal logs a refused runtime, at most a few lines per interval
// however many there are.
func (a *Agent) logRefusal(msg string, args ...any) {
	ok, suppressed := a.refusals.Allow(time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	a.log.Warn(msg, args...)
}

// Serve accepts runtimes on ln until Shutdown, after which it returns
// [server.ErrClosed].
func (a *Agent) Serve(ln *net.UnixListener) error {
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return server.ErrClosed
	}
	a.lns = append(a.lns, ln)
	a.serving++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.serving--
		a.cond.Broadcast()
		a.mu.Unlock()
	}()
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			a.mu.Lock()
			if a.handing && !a.closing {
				// A hand-over: runtimes wait in the backlog until it is
				// decided (handover.go).
				a.parked++
				a.cond.Broadcast()
				for a.handing {
					a.cond.Wait()
				}
				a.parked--
			}
			closing := a.closing
			a.mu.Unlock()
			if closing {
				return server.ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// Judged at once: a runtime may exit as soon as it has sent.
		a.mu.Lock()
		a.starting++
		a.mu.Unlock()
		cred, v := judge(uc)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.handle(uc, cred, v)
		}()
	}
}

// maxStateSize bounds a ContainerProcessState (runc's are a few KiB).
const maxStateSize = 64 << 10

// DefaultMaxContainers is how many containers' key namespaces an agent
// holds at once unless Config.MaxContainers says otherwise.
const DefaultMaxContainers = 1024

// A runtime's verdict (judge).
type verdict int

const (
	refused verdict = iota
	// equal: the agent's equal, its capabilities read.
	equal
	// unread: the agent's uid, reaped before its capabilities could be
	// read; judged by the container it hands over (Agent.join).
	unread
)

// judge says whether the runtime at the other end of uc is the agent's
// equal: its user (root for the system daemon) with every capability
// the agent holds. A container's id names its key namespace, and anyone
// else could make namespaces without end, or join another's by naming
// it. Its capabilities are read as soon as it is accepted (in the accept
// loop, before anything else), those of a runtime that has exited but
// is not yet reaped too ([process.Handle.RuntimeCapabilities]).
//
// A runtime reaped before that (runc sends its container and exits, and
// under load its parent has often reaped it before the agent accepts)
// has nothing left to read but its uid, which cannot decide: a root
// process without capabilities (a container's root, a service with an
// empty bounding set) that connects from a child exiting at once would
// be as good as the runtime. Such a runtime, if it had the agent's uid,
// is "unread": what it hands over must prove that a privileged process
// made the container, and that the container is new (Agent.join).
func judge(uc *net.UnixConn) (peer.Cred, verdict) {
	cred, err := peer.Of(uc)
	if err != nil || cred.PID <= 0 {
		return cred, refused
	}
	h := process.Open(uc, cred.PID)
	var caps uint64
	var known, reaped bool
	if !h.IsPeer() && process.PeerReaped(uc) {
		reaped, known = true, true // none that can be read
	} else {
		caps, known, reaped = h.RuntimeCapabilities(cred.UID)
	}
	h.Close()
	switch {
	case process.AsPrivileged(cred.UID, caps, known):
		return cred, equal
	case reaped && cred.UID == uint32(os.Geteuid()):
		return cred, unread
	}
	return cred, refused
}

// handle takes one runtime's message and serves its listener; v is
// judge's verdict on the runtime.
func (a *Agent) handle(uc *net.UnixConn, cred peer.Cred, v verdict) {
	defer uc.Close()
	// A hand-over waits for it until its listener is served (and so
	// found by the namespace's Freeze) or refused.
	started := sync.OnceFunc(func() {
		a.mu.Lock()
		a.starting--
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer started()
	if v == refused {
		a.logRefusal("ukeyd: seccomp agent: refusing a runtime less privileged than the agent", "uid", cred.UID, "pid", cred.PID)
		return
	}
	uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, maxStateSize)
	oob := make([]byte, syscall.CmsgSpace(4*8))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		a.logRefusal("ukeyd: seccomp agent: no message from the runtime", "err", err)
		return
	}
	var fds []int
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if r, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	var st ContainerProcessState
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		a.logRefusal("ukeyd: seccomp agent: the runtime's state does not decode", "err", err)
		return
	}
	i := slices.Index(st.FDs, "seccompFd")
	if i < 0 || i >= len(fds) || st.State.ID == "" {
		a.logRefusal("ukeyd: seccomp agent: no listener, or no container id", "fds", st.FDs, "id", st.State.ID)
		return
	}
	// The container's id is bound to the container's own processes: the
	// first listener of an id records the namespaces of the process the
	// state names, a later one must name a process in the same, and
	// only the processes in them are served (server.Config.Member), whatever
	// listener their calls come through.
	init, who, hostMade, err := container.Of(st.Pid, st.State.Pid)
	if err != nil {
		a.logRefusal("ukeyd: seccomp agent: refusing a container", "container", st.State.ID, "pid", st.Pid, "reason", err.Error())
		return
	}
	// A CRI runtime's container is in its pod's key namespace unless
	// its profile asks for one of its own; the pod's sandbox id is bound
	// to the namespaces its containers share, read from the container's
	// init while it lives.
	meta := strings.Fields(st.Metadata)
	sandbox := ""
	var pod container.Pod
	if !slices.Contains(meta, PerContainerMetadata) {
		sandbox = sandboxOf(&st)
	}
	if sandbox != "" {
		if pod, err = container.PodOf(&init); err != nil {
			init.Close()
			a.logRefusal("ukeyd: seccomp agent: refusing a container", "container", st.State.ID, "pod", sandbox, "pid", st.Pid, "reason", err.Error())
			return
		}
		if !pod.Shared() {
			// The host's IPC and network namespaces: nothing binds
			// the sandbox's id to the pod.
			a.log.Info("ukeyd: seccomp agent: a pod in the host's IPC and network namespaces has a key namespace per container",
				"container", st.State.ID, "pod", sandbox)
			sandbox = ""
		}
	}
	fd := fds[i]
	fds[i] = -1
	m, why := a.join(st.State.ID, who, init, v == unread, hostMade, sandbox, pod)
	if m == nil {
		unix.Close(fd)
		if why != "" {
			a.logRefusal("ukeyd: seccomp agent: refusing a container", "container", st.State.ID, "pod", sandbox, "pid", st.Pid, "reason", why)
		}
		return
	}
	ns := m.ns
	defer a.leave(m)
	a.log.Info("ukeyd: seccomp agent: serving a container's key calls", "container", st.State.ID, "pod", ns.sandbox, "pid", st.Pid,
		"runtime_gone", v == unread)
	// A profile that hands the agent the notification pipes' calls too
	// says so in its listenerMetadata (ukeyctl seccomp-profile writes
	// it): only then are the container's programs told that there are
	// notifications.
	done, err := ns.srv.StartListener(fd, slices.Contains(meta, NotifyMetadata), m.tag)
	started()
	if err != nil {
		a.log.Warn("ukeyd: seccomp agent: cannot serve the listener", "container", st.State.ID, "err", err)
		return
	}
	<-done
}

// join returns container id's record, making it and, for a new
// container, taking it into its pod's namespace (sandbox, bound to pod)
// or making one of its own, and counts one more listener of it; nil
// once the agent is closing (why is then ""), or if the container of
// that id is another, or if the agent holds as many as it may, or if an
// unread runtime hands in a container that does not prove itself, or if
// the container names a pod whose namespaces it is not in (why says
// which). It takes init, the handle of the container's init
// ([container.Of]), and pod.
//
// A runtime unread (judge: reaped before its capabilities could be read)
// is taken on what it handed over, which outlives it: a new container
// (its id no live container's, its namespace no container's the agent
// holds) in a namespace only a privileged process could have made
// (hostMade: owned by the daemon's user namespace, which needs
// CAP_SYS_ADMIN there). A root process without capabilities can make no
// such namespace, nor enter one (setns needs CAP_SYS_ADMIN over it), so
// the processes behind its listener are never in the namespace it names
// (server.Config.Member refuses them); and it cannot name a container the agent
// holds, so it can neither join one nor keep a dead one's keys alive,
// nor bind one namespace twice. It can bind a namespace that exists and
// is no container of the agent's (another engine's container, a
// service's): one namespace, of the bounded many (MaxContainers), that
// serves none of its processes.
//
// A pod's namespace is bound to the IPC and network namespaces of the
// container that made it ([container.Pod]), held open while it lives;
// a container naming its sandbox from others is refused, whoever hands
// it in: the sandbox id is only a name in the state. An unread runtime
// may hand in a container whose pid namespace is already a container's
// of the pod it joins (the pod's containers share their pids), whose
// processes that namespace serves already.
func (a *Agent) join(id string, who container.Identity, init process.Handle, unread, hostMade bool, sandbox string, pod container.Pod) (*member, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	refuse := func(why string) (*member, string) {
		init.Close()
		pod.Close()
		return nil, why
	}
	if a.closing {
		return refuse("")
	}
	m := a.ctrs[id]
	// The pod's namespace the container would join, if its sandbox's
	// is bound to the container's IPC and network namespaces.
	var inPod *namespace
	if ns := a.pods[sandbox]; sandbox != "" && ns != nil && ns.bind.Same(pod) {
		inPod = ns
	}
	if unread {
		why := ""
		switch {
		case !hostMade:
			why = "a runtime gone before it could be read, handing a container whose namespace it could have made without privilege"
		case m != nil && !m.init.Exited():
			why = "a runtime gone before it could be read, handing a listener under a live container's id"
		default:
			// A pod's containers may share a pid namespace
			// (shareProcessNamespace): one that is already a
			// container's of the pod the container joins gives
			// nothing its processes do not have.
			for _, other := range a.ctrs {
				if other.who == who && (inPod == nil || other.ns != inPod) {
					why = "a runtime gone before it could be read, handing a namespace that is already a container's"
					break
				}
			}
		}
		if why != "" {
			return refuse(why)
		}
	}
	if m != nil && m.who != who {
		if !m.init.Exited() {
			return refuse("the id is a live container's, and the process the state names is not in it")
		}
		// The container of that id is gone (its init has exited) and
		// waits for its last listener: a new container has the id now.
		// The old one goes with its listener (leave).
		delete(a.ctrs, id)
		m = nil
	}
	if m != nil {
		// Another process of a container served (runc exec): its
		// container's namespace, whatever its state says.
		init.Close()
		pod.Close()
		m.listeners++
		return m, ""
	}
	if len(a.ctrs) >= a.maxContainers() {
		return refuse("the agent holds as many containers as it may")
	}
	ns := a.pods[sandbox]
	switch {
	case sandbox == "":
		ns = a.newNamespace("", container.Pod{})
		a.nss[ns] = true
	case ns == nil:
		ns = a.newNamespace(sandbox, pod)
		a.pods[sandbox] = ns
		a.nss[ns] = true
	case !ns.bind.Same(pod):
		return refuse("the container names a pod's sandbox, and its IPC or network namespace is not the pod's")
	default:
		pod.Close()
	}
	m = &member{ns: ns, id: id, who: who, init: init, listeners: 1, tag: newTag()}
	a.ctrs[id] = m
	ns.members = append(ns.members, m)
	ns.setMembers()
	return m, ""
}

// newNamespace makes a key namespace, a container's or (sandbox) a
// pod's bound to pod, on the agent's commons (no goroutine of its own),
// with one container's share of the agent's bounds:
// its keys count against a share of the agent's (keys, bytes, big_key
// files, and files per uid), each uid in it has a quota of at most its
// share (root's too), and its Server keeps at most its share of
// processes and listeners (per uid too), within the agent's pool. a.mu
// is held.
func (a *Agent) newNamespace(sandbox string, pod container.Pod) *namespace {
	ctr, uid := Share(a.bounds)
	share := keys.NewShare(a.keys, keys.ShareLimits{Keys: ctr.Keys, Bytes: ctr.Bytes,
		BigKeyFiles: ctr.BigKeyFiles, BigKeyFilesPerUID: uid.BigKeyFiles})
	shared, release := a.commons.acquire()
	svc := keys.New(append(slices.Concat(a.cfg.Keys, shared), keys.WithShare(share))...)
	t := svc.Tunables()
	t.MaxKeys, t.MaxBytes = min(t.MaxKeys, uid.Keys), min(t.MaxBytes, uid.Bytes)
	t.RootMaxKeys, t.RootMaxBytes = min(t.RootMaxKeys, uid.Keys), min(t.RootMaxBytes, uid.Bytes)
	_ = svc.SetTunables(t) // within the valid range: each at least 1
	ns := &namespace{svc: svc, share: share, letGo: release, sandbox: sandbox, bind: pod}
	ns.setMembers()
	ns.srv = server.New(svc, a.serverConfig(ns, ctr, uid))
	return ns
}

// serverConfig is what the Server of namespace ns is made with: no
// logins, at most its share of processes and listeners (ctr, and uid
// for each uid in it) within the agent's pool, the agent's slots of
// expensive operations, and only its containers' own processes served.
func (a *Agent) serverConfig(ns *namespace, ctr, uid Bounds) server.Config {
	cfg := a.cfg.Server
	cfg.NoLogins = true
	cfg.Limits = cfg.Limits.WithDefaults()
	cfg.Limits.MaxProcs = min(cfg.Limits.MaxProcs, ctr.Procs)
	cfg.Limits.MaxProcsPerUID = min(cfg.Limits.MaxProcsPerUID, uid.Procs)
	cfg.Member = func(pid int) bool { return container.HoldsAny(*ns.whos.Load(), pid) }
	cfg.HandOverExtra, cfg.TakeOverExtra, cfg.CanHandOver, cfg.BeforeTakeover, cfg.Namespaces = nil, nil, nil, nil, nil
	cfg.Metrics = nsObserver{ns: ns, next: a.cfg.Server.Metrics}
	cfg.Pool = a.procs
	cfg.Expensive = a.heavy
	return cfg
}

// maxContainers is Config.MaxContainers or its default.
func (a *Agent) maxContainers() int {
	if a.cfg.MaxContainers > 0 {
		return a.cfg.MaxContainers
	}
	return DefaultMaxContainers
}

// leave counts a listener of container m out: with its last the
// container leaves its namespace, and with the namespace's last
// container its keys go.
func (a *Agent) leave(m *member) {
	a.mu.Lock()
	m.listeners--
	// A frozen namespace's members are the hand-over's to let go
	// (handover.go).
	if m.listeners > 0 || m.ns.frozen {
		a.mu.Unlock()
		return
	}
	last := a.dropLocked(m)
	a.mu.Unlock()
	a.gone(m, last)
}

// dropLocked takes member m out of its namespace, and the namespace
// out of the agent if m was its last; a.mu is held. It says whether it
// was.
func (a *Agent) dropLocked(m *member) bool {
	if a.ctrs[m.id] == m {
		delete(a.ctrs, m.id)
	}
	ns := m.ns
	if i := slices.Index(ns.members, m); i >= 0 {
		ns.members = slices.Delete(ns.members, i, i+1)
	}
	ns.setMembers()
	last := len(ns.members) == 0
	if last {
		if ns.sandbox != "" && a.pods[ns.sandbox] == ns {
			delete(a.pods, ns.sandbox)
		}
		delete(a.nss, ns)
	}
	return last
}

// gone lets go of member m, dropped (dropLocked), and of its namespace
// with its last member.
func (a *Agent) gone(m *member, last bool) {
	m.init.Close()
	ns := m.ns
	if !last {
		a.log.Info("ukeyd: seccomp agent: a container's last process has exited; its pod's keys stay", "container", m.id, "pod", ns.sandbox)
		return
	}
	ns.end()
	if ns.sandbox != "" {
		a.log.Info("ukeyd: seccomp agent: a pod's last process has exited; its keys are gone", "container", m.id, "pod", ns.sandbox)
	} else {
		a.log.Info("ukeyd: seccomp agent: a container's last process has exited; its keys are gone", "container", m.id)
	}
}

// Containers returns the ids of the containers whose keys the agent
// holds.
func (a *Agent) Containers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.ctrs))
}

// Pods returns the sandbox ids of the pods whose keys the agent holds.
func (a *Agent) Pods() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.pods))
}

// NamespaceOf returns the key namespace (a container's, or its pod's)
// whose container holds process pid (in the daemon's pid namespace): its
// [keys.Service] and [server.Server], or false for a process of no
// container the agent serves. A container whose init has exited holds
// nobody: the namespaces that identify it may be another's by now. pid is only
// a name: the caller keeps a handle of the process (a pidfd) across the
// call and trusts the answer only if the process still lives after it
// (package procview does).
func (a *Agent) NamespaceOf(pid int) (*keys.Service, *server.Server, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Under a.mu: a container leaves the map before its init's handle
	// is closed (leave). The reader's namespaces are read once for all
	// the containers (container.IndexHolding), not once each.
	live := make([]*member, 0, len(a.ctrs))
	whos := make([]container.Identity, 0, len(a.ctrs))
	for _, m := range a.ctrs {
		if !m.init.Exited() {
			live = append(live, m)
			whos = append(whos, m.who)
		}
	}
	if i := container.IndexHolding(whos, pid); i >= 0 {
		return live[i].ns.svc, live[i].ns.srv, true
	}
	return nil, nil, false
}

// Shutdown stops accepting runtimes, stops serving every container (their
// pending calls fail), destroys their keys, and waits.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	a.handing = false
	a.cond.Broadcast()
	for _, ln := range a.lns {
		ln.Close()
	}
	nss := maps.Clone(a.nss)
	a.mu.Unlock()
	for ns := range nss {
		ns.srv.Shutdown(ctx) // ends its listeners; handle then leaves
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newTag returns a member's tag: random, so that no two members, of this
// daemon or handed over, share one.
func newTag() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
