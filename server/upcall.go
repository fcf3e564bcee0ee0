package server

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// HelperEnv is the environment variable through which a request-key
// helper started by the daemon receives the token that lets it act with
// the authority to construct the key (and with nothing else).
const HelperEnv = endpoint.HelperEnv

// Helper runs request-key helper programs for a [Server]: the daemon's
// equivalent of the kernel calling /sbin/request-key.
type Helper struct {
	// Path and Args start the program; the kernel's seven arguments
	// (create, key, uid, gid, thread, process and session keyrings) follow
	// Args.
	Path string
	Args []string
	// Socket is the daemon's socket, passed in UKEYS_SOCKET.
	Socket string
	// Intercept, if set, is a ukeyctl that runs the helper under
	// interception (ukeyctl run): the helper's own add_key, keyctl and
	// request_key calls, and its children's (the stock /sbin/request-key
	// and the "keyctl instantiate %k %c %S" lines of request-key.conf),
	// are then served by the daemon with the upcall's authority, as the
	// kernel serves its helpers.
	Intercept string
	server    *Server
}

// Upcaller returns the [keys.Upcaller] that runs h for s. A program that
// builds its [keys.Service] before its [Server] gives the Service a
// [*Helper] instead ([keys.WithUpcall](h)) and the Server the same one
// ([Config.Helper]), which [New] binds to it.
func (s *Server) Upcaller(h Helper) keys.Upcaller {
	h.server = s
	return &h
}

// errUnbound is what a Helper that no Server has taken returns.
var errUnbound = errors.New("server: request-key Helper not given to a Server (Config.Helper)")

// Upcall runs the helper and waits for it. A helper still running when ctx
// ends (the upcall timeout), or when a shutdown runs out of time, is
// killed; the keys package then negates the key.
//
// The helper's token (helper.go) is good only for the helper's own
// process tree and only until the helper exits: the grant ends when the
// helper has exited and before the daemon reaps it, so that while a grant
// lasts the helper's pid cannot name another process.
func (h *Helper) Upcall(ctx context.Context, u *keys.Upcall) error {
	if h.server == nil {
		return errUnbound
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.server.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	charged, e := h.server.admitUpcall(u.UID)
	if e != 0 {
		h.server.logLimited(&h.server.refusals, "ukeyd: too many request-key helpers running for one uid; not starting another", "uid", u.UID, "charged_to", charged)
		return e
	}
	defer h.server.dropUpcall(charged)
	token, grant := h.server.addHelper(u)
	defer h.server.dropHelper(token, grant)
	args := append(append([]string(nil), h.Args...), u.Args()...)
	path := h.Path
	if h.Intercept != "" {
		args = append([]string{"run", "--", h.Path}, args...)
		path = h.Intercept
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"HOME=/", "PATH=/sbin:/bin:/usr/sbin:/usr/bin", "UKEYS_SOCKET=" + h.Socket, HelperEnv + "=" + token}
	cmd.Dir = "/" // as the kernel's helper: not the daemon's own directory
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the helper's whole process group: its children too.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = time.Second
	err := cmd.Start()
	if err == nil {
		grant.started(cmd.Process.Pid)
		process.AwaitExit(cmd.Process.Pid)
		grant.end()
		err = cmd.Wait()
	}
	if err != nil {
		h.server.log.Warn("ukeyd: request-key helper failed", "key", int32(u.Key), "type", u.Type, "err", err)
	}
	return err
}
