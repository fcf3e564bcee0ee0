package main

import (
	"log/slog"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/procview"
	"github.com/ukeys/ukeys/server"
)

// procConfig is the Config of the /proc/keys, /proc/key-users and
// /proc/sys/kernel/keys/* files in -proc-dir, which the containers'
// recipes bind over the kernel's: each reader sees the key namespace of
// its container (ag's, if the agent runs), and a host process the
// daemon's own store (svc, srv).
func procConfig(ag *agent.Agent, svc *keys.Service, srv *server.Server, log *slog.Logger) procview.Config {
	lookup := func(pid int) (procview.Namespace, bool) {
		if ag == nil {
			return procview.Namespace{}, false
		}
		s, sv, ok := ag.NamespaceOf(pid)
		return procview.Namespace{Keys: s, ProcKeys: sv.ProcKeys}, ok
	}
	return procview.Config{Lookup: lookup,
		Host: &procview.Namespace{Keys: svc, ProcKeys: srv.ProcKeys}, Logger: log}
}
