package server

import (
	"context"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
)

// A process whose pid the kernel hands to a process of another uid while
// the first one's connection is still being served (a request-key wait
// can hold it for a minute) must still have its keyrings released when
// that connection ends: the new process takes the pid's entry, not the
// old process's keys.
func TestPIDReuseReleasesTheOldProcess(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	const pid = 4242
	open := func(cred keys.Cred) *conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.usage.admitConn(cred.UID); e != 0 {
			t.Fatal(e)
		}
		p := s.procs.lookup(cred.PID)
		if p == nil || p.caller.Cred().UID != cred.UID {
			if p != nil {
				s.dropProcLocked(p)
			}
			if e := s.usage.admitProc(cred.UID); e != 0 {
				t.Fatal(e)
			}
			p = &proc{caller: svc.NewCaller(cred), tracked: true, handle: process.Unpinned(cred.PID), charge: cred.UID}
			s.procs.add(cred.PID, p)
		}
		p.conns++
		c := newConn(s, nil, cred, p, cred.UID)
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		return c
	}
	old := open(keys.Cred{UID: 1000, GID: 100, PID: pid})
	if _, err := old.kc.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := old.kc.AddKey("user", "k", []byte("v"), keys.SessionKeyring); err != nil {
		t.Fatal(err)
	}
	reused := open(keys.Cred{UID: 2000, GID: 200, PID: pid})
	s.release(old)
	s.release(reused)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := svc.QuotaUsage(1000); n > 2 {
		// Only uid 1000's user and user-session keyrings may remain.
		t.Fatalf("the old process's session and key outlived it: uid 1000 holds %d keys", n)
	}
	if len(s.procs.byPID) != 0 || len(s.usage.byUID) != 0 || s.usage.nprocs != 0 || s.usage.nconns != 0 {
		t.Fatalf("%d process entries, %d uids' usage, %d processes and %d connections counted after both ended", len(s.procs.byPID), len(s.usage.byUID), s.usage.nprocs, s.usage.nconns)
	}
}
