package agent

import (
	"testing"

	"github.com/ukeys/ukeys/server"
)

// Each container's Server is made within the agent's shared bounds: the
// daemon's slots of expensive operations when they are given (so that a
// container's signature check waits for the daemon's processors, as
// TestServersShareExpensiveSlots in server shows), one pool of processes
// and listeners for every container, the container's share of each
// bound, no logins, and only the container's processes served.
func TestContainersShareTheAgentsBounds(t *testing.T) {
	host := server.NewSlots(1)
	a := New(Config{Server: server.Config{Expensive: host, Limits: server.Limits{MaxProcs: 1000, MaxProcsPerUID: 1000}},
		Bounds: Bounds{Procs: 64}})
	defer a.Shutdown(t.Context())
	ctr, uid := Share(a.Bounds())
	one := a.serverConfig(&namespace{}, ctr, uid)
	two := a.serverConfig(&namespace{}, ctr, uid)
	if one.Expensive != host || two.Expensive != host {
		t.Error("a container's Server does not take the daemon's slots of expensive operations")
	}
	if one.Pool == nil || one.Pool != two.Pool {
		t.Error("the containers' Servers do not share one pool of processes and listeners")
	}
	if one.Member == nil || !one.NoLogins {
		t.Errorf("a container's Server serves every process (member %v) or has logins (%v)", one.Member != nil, !one.NoLogins)
	}
	if one.Limits.MaxProcs != ctr.Procs || one.Limits.MaxProcsPerUID != uid.Procs {
		t.Errorf("a container's Server keeps %d processes, %d a uid; its share is %d, %d a uid",
			one.Limits.MaxProcs, one.Limits.MaxProcsPerUID, ctr.Procs, uid.Procs)
	}

	// Without the daemon's, the containers share slots of their own.
	b := New(Config{})
	defer b.Shutdown(t.Context())
	c1 := b.serverConfig(&namespace{}, ctr, uid)
	c2 := b.serverConfig(&namespace{}, ctr, uid)
	if c1.Expensive == nil || c1.Expensive != c2.Expensive {
		t.Error("without the daemon's slots, the containers' Servers do not share slots of their own")
	}
}
