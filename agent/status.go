package agent

import (
	"cmp"
	"slices"
	"time"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// Namespaces returns the key namespaces the agent holds, pods' first
// then containers' own, each by its id: its containers (those whose
// init has exited and which wait for their last listener too), what its
// keys hold of its share, the processes its Server keeps, and the calls
// it has served and refused since it was made (a hand-over carries
// them). ukeyd gives it to its status ([server.Config.Namespaces]),
// for callers as privileged as the daemon, and to its metrics.
//
// A container's id may name two namespaces for a moment: a new
// container's, and the old one of that id that waits for its last
// listener; the live one comes first.
func (a *Agent) Namespaces() []wire.NamespaceStatus {
	type one struct {
		ns   *namespace
		st   wire.NamespaceStatus
		live bool
	}
	a.mu.Lock()
	all := make([]one, 0, len(a.nss))
	for ns := range a.nss {
		o := one{ns: ns, st: wire.NamespaceStatus{Kind: "pod", ID: ns.sandbox}}
		for _, m := range ns.members {
			if !m.ghost {
				o.st.Containers = append(o.st.Containers, m.id)
			}
			o.live = o.live || a.ctrs[m.id] == m
		}
		if ns.sandbox == "" {
			o.st.Kind = "container"
			if len(ns.members) > 0 {
				o.st.ID = ns.members[0].id
			}
		}
		slices.Sort(o.st.Containers)
		all = append(all, o)
	}
	a.mu.Unlock()
	// What each holds is read outside the agent's lock: its Server's
	// and its share's locks are theirs.
	out := make([]wire.NamespaceStatus, len(all))
	slices.SortFunc(all, func(x, y one) int {
		return cmp.Or(-cmp.Compare(x.st.Kind, y.st.Kind), cmp.Compare(x.st.ID, y.st.ID), compareBool(y.live, x.live))
	})
	for i, o := range all {
		u := o.ns.share.Usage()
		o.st.Keys, o.st.Bytes = u.Keys, u.Bytes
		o.st.Processes = o.ns.srv.Stats().Processes
		o.st.Calls, o.st.Refusals = o.ns.calls.Load(), o.ns.refusals.Load()
		out[i] = o.st
	}
	return out
}

func compareBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}

// nsObserver counts a namespace's calls and refusals for its status and
// metrics, and tells the daemon's [server.Observer] (Config.Server's
// Metrics), if any, as the daemon's own calls do.
type nsObserver struct {
	ns   *namespace
	next server.Observer
}

func (o nsObserver) Observe(op wire.Op, errno uint16, d time.Duration) {
	o.ns.calls.Add(1)
	switch keys.Errno(errno) {
	case keys.EACCES, keys.EPERM, keys.EDQUOT, keys.EMFILE, keys.ENFILE:
		o.ns.refusals.Add(1)
	}
	if o.next != nil {
		o.next.Observe(op, errno, d)
	}
}

func (o nsObserver) ConnOpened() {
	if o.next != nil {
		o.next.ConnOpened()
	}
}

func (o nsObserver) ConnClosed() {
	if o.next != nil {
		o.next.ConnClosed()
	}
}

func (o nsObserver) Refused() {
	if o.next != nil {
		o.next.Refused()
	}
}
