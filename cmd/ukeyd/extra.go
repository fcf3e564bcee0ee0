package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/procview"
)

// The daemon's section of a hand-over (server.Config.HandOverExtra)
// carries the seccomp agent's containers and, with -proc-dir, the /proc
// files' FUSE connection. With the files it is:
//
//	"UKX\x01", a byte of parts (1: the files, 2: the agent's)
//	the files' part (procview.Server.HandOver; its one descriptor first)
//	the agent's part (agent.Agent.HandOver; the descriptors after)
//
// Without them it is the agent's section alone, as daemons before the
// files' hand-over wrote and read it: an agent's section begins with its
// header's length, under 16 MiB, whose first byte is 0, never 'U'.
var extraMagic = []byte("UKX\x01")

const (
	partFiles = 1
	partAgent = 2
)

// extra is what the daemon hands over beside its Server's state.
type extra struct {
	ag  *agent.Agent
	pv  **procview.Server // the files, once mounted or taken over
	log *slog.Logger
	// taken is the files a hand-over brought, and their start: the
	// daemon starts them once it serves (mountProcFiles).
	taken      *procview.Server
	takenStart func(*procview.Config)
}

func (x *extra) handOver(w io.Writer) ([]int, func(bool), error) {
	pv := *x.pv
	if pv == nil {
		if x.ag == nil {
			return nil, func(bool) {}, nil
		}
		return x.ag.HandOver(w)
	}
	parts := byte(partFiles)
	if x.ag != nil {
		parts |= partAgent
	}
	if _, err := w.Write(append(bytes.Clone(extraMagic), parts)); err != nil {
		return nil, nil, err
	}
	fd, pdone, err := pv.HandOver(w)
	if err != nil {
		return nil, nil, err
	}
	fds := []int{fd}
	done := pdone
	if x.ag != nil {
		afds, adone, err := x.ag.HandOver(w)
		if err != nil {
			pdone(false)
			return nil, nil, err
		}
		fds = append(fds, afds...)
		done = func(ok bool) { pdone(ok); adone(ok) }
	}
	return fds, done, nil
}

func (x *extra) takeOver(r io.Reader, fds []int) (func(bool), error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		closeFDs(fds)
		return nil, err
	}
	if !bytes.Equal(head[:], extraMagic) {
		return x.takeAgent(io.MultiReader(bytes.NewReader(head[:]), r), fds)
	}
	var parts [1]byte
	if _, err := io.ReadFull(r, parts[:]); err != nil {
		closeFDs(fds)
		return nil, err
	}
	if parts[0]&partFiles == 0 || len(fds) == 0 {
		closeFDs(fds)
		return nil, errors.New("ukeyd: a hand-over's section without the /proc files' part")
	}
	s, pstart, err := procview.TakeOver(r, fds[0])
	if err != nil {
		closeFDs(fds[1:])
		return nil, err
	}
	astart := func(bool) {}
	if parts[0]&partAgent != 0 {
		if astart, err = x.takeAgent(r, fds[1:]); err != nil {
			pstart(nil)
			return nil, err
		}
	} else {
		closeFDs(fds[1:])
	}
	return func(serve bool) {
		if serve {
			x.taken, x.takenStart = s, pstart
		} else {
			pstart(nil)
		}
		astart(serve)
	}, nil
}

func (x *extra) takeAgent(r io.Reader, fds []int) (func(bool), error) {
	if x.ag == nil {
		x.log.Warn("ukeyd: the hand-over carries a seccomp agent's containers and this daemon runs none (-seccomp-agent): dropped")
		closeFDs(fds)
		return func(bool) {}, nil
	}
	return x.ag.TakeOver(r, fds)
}

// files returns the /proc files a hand-over brought, serving with cfg,
// if dir is theirs; others are let go of (the old daemon's mount, whose
// containers' binds then fail, as at a fresh start).
func (x *extra) files(dir string, cfg procview.Config) *procview.Server {
	s, start := x.taken, x.takenStart
	x.taken, x.takenStart = nil, nil
	if s == nil {
		return nil
	}
	if s.Dir() != dir {
		x.log.Warn("ukeyd: the /proc files handed over are mounted elsewhere than -proc-dir; mounting afresh", "theirs", s.Dir(), "dir", dir)
		start(nil)
		procview.Detach(s.Dir())
		return nil
	}
	start(&cfg)
	return s
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
