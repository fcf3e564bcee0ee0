package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/keys"
)

// An Agent is a seccomp agent as the OCI runtime specification defines
// it (linux.seccomp.listenerPath): a container runtime (runc, crun)
// connects to its socket and sends the container's seccomp listener with
// the container's ContainerProcessState, and the agent serves the
// add_key, keyctl and request_key calls of the container's processes.
// Each container is a key namespace of its own: a keys.Service and a
// Server of its own, so that no key, keyring, persistent keyring or
// quota of one container is visible to or charged to another (what the
// kernel's keyrings lack, and why runtimes forbid those calls). A
// container's keys are destroyed when its last process has exited (its
// last listener has no task left).
type Agent struct {
	cfg AgentConfig
	log *slog.Logger

	// refusals throttles the log lines of refused runtimes, as the
	// main socket's are (Server.logRefusal): the agent's socket is open
	// to every user, and each refusal would otherwise be a line.
	refusals rateLimiter

	mu      sync.Mutex
	nss     map[string]*namespace
	lns     []*net.UnixListener
	closing bool
	wg      sync.WaitGroup
}

// AgentConfig configures an Agent: what each container's key namespace
// is made with.
type AgentConfig struct {
	Logger *slog.Logger
	Keys   []keys.Option // for each container's keys.Service
	Server Config        // for each container's Server
}

// namespace is one container's keys.
type namespace struct {
	svc       *keys.Service
	srv       *Server
	listeners int
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

// NewAgent returns an agent that makes each container's namespace with
// cfg.
func NewAgent(cfg AgentConfig) *Agent {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Server.Logger == nil {
		cfg.Server.Logger = log
	}
	return &Agent{cfg: cfg, log: log, nss: make(map[string]*namespace),
		refusals: rateLimiter{interval: 10 * time.Second, burst: 5}}
}

// logRefusal logs a refused runtime, at most a few lines per interval
// however many there are.
func (a *Agent) logRefusal(msg string, args ...any) {
	ok, suppressed := a.refusals.allow(time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	a.log.Warn(msg, args...)
}

// Serve accepts runtimes on ln until Shutdown.
func (a *Agent) Serve(ln *net.UnixListener) error {
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return ErrClosed
	}
	a.lns = append(a.lns, ln)
	a.mu.Unlock()
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			a.mu.Lock()
			closing := a.closing
			a.mu.Unlock()
			if closing {
				return ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.handle(uc)
		}()
	}
}

// maxStateSize bounds a ContainerProcessState (runc's are a few KiB).
const maxStateSize = 64 << 10

// handle takes one runtime's message and serves its listener.
func (a *Agent) handle(uc *net.UnixConn) {
	defer uc.Close()
	// Only the agent's equal (its user, root for the system daemon,
	// with every capability it holds) may hand it a container: a
	// container's id names its key namespace, and anyone else could join
	// another's by naming it. A runtime already gone is judged by its
	// uid alone, as before capabilities were asked.
	cred, err := peerCred(uc)
	privileged := false
	if err == nil {
		h := openProc(uc, cred.PID)
		gone := cred.PID <= 0 || h.exited()
		if !gone {
			cred.Caps, cred.CapsKnown = h.capabilities(cred.UID)
			gone = h.exited()
		}
		h.close()
		if gone {
			// A runtime may send its container and exit before the
			// agent reads it (Docker's does, now and then): its
			// capabilities can no longer be read, and its uid decides,
			// root's or the agent's own.
			privileged = cred.UID == 0 || int(cred.UID) == os.Geteuid()
		} else {
			privileged = asPrivileged(cred)
		}
	}
	if err != nil || !privileged {
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
				closeFD(fd)
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
	fd := fds[i]
	fds[i] = -1
	ns := a.join(st.State.ID)
	if ns == nil {
		closeFD(fd)
		return
	}
	defer a.leave(st.State.ID, ns)
	a.log.Info("ukeyd: seccomp agent: serving a container's key calls", "container", st.State.ID, "pid", st.Pid)
	if err := ns.srv.ServeListener(fd); err != nil {
		a.log.Warn("ukeyd: seccomp agent: cannot serve the listener", "container", st.State.ID, "err", err)
	}
}

// join returns container id's namespace, making it, and counts one more
// listener in it; nil once the agent is closing.
func (a *Agent) join(id string) *namespace {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return nil
	}
	ns := a.nss[id]
	if ns == nil {
		svc := keys.New(a.cfg.Keys...)
		cfg := a.cfg.Server
		cfg.NoLogins = true
		ns = &namespace{svc: svc, srv: New(svc, cfg)}
		a.nss[id] = ns
	}
	ns.listeners++
	return ns
}

// leave counts a listener of container id's out; the container's keys
// go with its last.
func (a *Agent) leave(id string, ns *namespace) {
	a.mu.Lock()
	ns.listeners--
	last := ns.listeners == 0
	if last && a.nss[id] == ns {
		delete(a.nss, id)
	}
	a.mu.Unlock()
	if last {
		ns.srv.Shutdown(context.Background())
		ns.svc.Close()
		a.log.Info("ukeyd: seccomp agent: a container's last process has exited; its keys are gone", "container", id)
	}
}

// Containers returns the ids of the containers whose keys the agent
// holds.
func (a *Agent) Containers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.nss))
	for id := range a.nss {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Shutdown stops accepting runtimes, stops serving every container (their
// pending calls fail), destroys their keys, and waits.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	for _, ln := range a.lns {
		ln.Close()
	}
	nss := make([]*namespace, 0, len(a.nss))
	for _, ns := range a.nss {
		nss = append(nss, ns)
	}
	a.mu.Unlock()
	for _, ns := range nss {
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
