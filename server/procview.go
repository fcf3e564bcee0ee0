package server

import "github.com/ukeys/ukeys/keys"

// ProcKeys renders /proc/keys as thread tid of process cred.PID (in the
// daemon's pid namespace) sees it with cred, its credentials of the
// moment: possession through the keyrings the server keeps for the
// process, which it meets now if it has not yet, as its first key call
// would (its session inherited from an ancestor the server keeps, else
// its user-session keyring). Its thread keyring counts for its main
// thread only: the server tells other threads apart by the task each is
// ([intercept.Caller.Task]), which a reader of a file does not give.
// It fails (EPERM) for a process the server does not serve
// ([Config.Member]). The seccomp agent's /proc files (package procview)
// call it for a container's readers, and for the host's on the daemon's
// own Server.
func (s *Server) ProcKeys(cred keys.Cred, tid int) (string, error) {
	s.syncForks()
	p, err := s.interceptedProc(cred, 0)
	if err != nil {
		return "", err
	}
	p.calls.mu.Lock()
	defer p.calls.mu.Unlock()
	if p.calls.execd.Swap(false) {
		p.calls.releaseLocked() // an exec queued: its threads are gone
	}
	v := p.caller
	if tid != cred.PID {
		v = p.caller.NewThread()
		defer v.Release()
	}
	return v.ProcKeysAs(cred), nil
}
