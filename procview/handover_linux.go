package procview

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The files go with the daemon's hand-over (ukeyd -takeover) and its
// restart through systemd's file-descriptor store, as the rest of its
// state does: the old daemon stops reading the FUSE connection between
// two requests, every request it read answered ([Server.HandOver]), and
// sends its /dev/fuse descriptor; the next one serves that same
// connection ([TakeOver]) without mounting again. The mount, and the
// bind mounts containers made of its files over their /proc/keys,
// /proc/key-users and /proc/sys/kernel/keys/*, never see the daemons
// change: a request made meanwhile waits in the kernel's queue for the
// next reader. Node ids are fixed ([tree]); an open file's handle goes
// over with the view it read, so that a reader that opened before reads
// on after (a sysctl opened for writing has its namespace checked by
// the old daemon only: its writes fail EIO).
//
// The section is a uint32 big-endian n, then n bytes of JSON
// (handoverRecord); its one descriptor is the connection's.

// HandoverVersion is the version of the files' section. A daemon reads
// every earlier version and refuses a later one.
const HandoverVersion = 1

// maxRecord bounds the section (every open file's view).
const maxRecord = 1 << 30

type handoverRecord struct {
	Version int    `json:"version"`
	Dir     string `json:"dir"`
	// Ino is the root's inode number ([Server]'s ino).
	Ino uint64 `json:"ino"`
	// Init is the kernel's INIT request as the first daemon read it:
	// the next one's ProtocolServer negotiates from it again.
	Init    []byte         `json:"init"`
	NextFH  uint64         `json:"next_fh"`
	Handles []handleRecord `json:"handles,omitempty"`
}

type handleRecord struct {
	FH     uint64 `json:"fh"`
	Node   uint64 `json:"node"`
	Data   []byte `json:"data,omitempty"`
	Sysctl string `json:"sysctl,omitempty"`
	Write  bool   `json:"write,omitempty"`
}

// HandOver stops reading (each request read answered first) and writes
// the files' section to w. fd is the connection's descriptor, still
// s's; done takes the hand-over's outcome: handed over, s lets go of
// the connection without unmounting (Close then does nothing);
// otherwise it reads again. It is for the daemon's
// server.Config.HandOverExtra.
func (s *Server) HandOver(w io.Writer) (fd int, done func(handedOver bool), err error) {
	s.mu.Lock()
	busy := s.gone || s.closing || s.handing
	if !busy {
		s.handing = true
	}
	s.mu.Unlock()
	if busy {
		return -1, nil, errors.New("procview: handed over, closed, or handing over already")
	}
	s.stop()
	rec := handoverRecord{Version: HandoverVersion, Dir: s.dir, Ino: s.ino, Init: s.init}
	s.fs.mu.Lock()
	rec.NextFH = s.fs.nextFH
	for fh, h := range s.fs.handles {
		rec.Handles = append(rec.Handles, handleRecord{FH: fh, Node: h.node, Data: h.data, Sysctl: h.sysctl, Write: h.write})
	}
	s.fs.mu.Unlock()
	resume := func(ok bool) {
		s.mu.Lock()
		s.handing = false
		closing := s.closing
		s.gone = s.gone || ok
		s.mu.Unlock()
		switch {
		case ok:
			s.release()
		case closing:
			// Closed meanwhile: what Close left to the outcome. Served
			// while unmounting, whose look at dir asks the files.
			s.start()
			if err := s.shut(); err != nil {
				s.fs.v.cfg.Logger.Warn("ukeyd: /proc files: unmounting after a failed hand-over", "dir", s.dir, "err", err)
			}
		default:
			s.start()
		}
	}
	b, err := json.Marshal(&rec)
	if err == nil {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		if _, err = w.Write(n[:]); err == nil {
			_, err = w.Write(b)
		}
	}
	if err != nil {
		resume(false)
		return -1, nil, err
	}
	return s.fd, resume, nil
}

// TakeOver reads the files' section (what HandOver wrote) with its
// connection, fd (taken): start serves the connection with cfg, once the
// old daemon has let go (the requests made meanwhile wait in the kernel's
// queue); start(nil) lets go of fd, which is the old daemon's still.
func TakeOver(r io.Reader, fd int) (*Server, func(cfg *Config), error) {
	var n [4]byte
	_, err := io.ReadFull(r, n[:])
	size := binary.BigEndian.Uint32(n[:])
	if err == nil && size > maxRecord {
		err = fmt.Errorf("a section of %d bytes", size)
	}
	var rec handoverRecord
	if err == nil {
		// Read as it comes: a garbled length allocates no more than the
		// section holds, not a gibibyte.
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(r, int64(size))); err == nil && len(b) < int(size) {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
	}
	switch {
	case err != nil:
	case rec.Version < 1 || rec.Version > HandoverVersion:
		err = fmt.Errorf("a section of version %d, where this daemon reads 1 to %d", rec.Version, HandoverVersion)
	case rec.Dir == "" || len(rec.Init) < 40 || hdrOpcode(rec.Init) != opInit:
		err = errors.New("a section without its directory or its INIT")
	case fd < 0:
		err = errors.New("the FUSE connection's descriptor did not come")
	}
	for _, h := range rec.Handles {
		if err == nil && (tree[h.Node] == nil || tree[h.Node].dir || h.FH == 0 || h.FH > rec.NextFH) {
			err = fmt.Errorf("an open file of node %d, handle %d", h.Node, h.FH)
		}
	}
	if err != nil {
		if fd >= 0 {
			closeFD(fd)
		}
		return nil, nil, fmt.Errorf("procview: the hand-over's section: %w", err)
	}
	s, err := newServer(rec.Dir, fd, rec.Ino, Config{})
	if err != nil {
		return nil, nil, err
	}
	s.init = rec.Init
	// The kernel sends INIT once a connection: the answer to this one
	// goes nowhere, and the ProtocolServer decodes as the first did.
	scratch := make([]byte, bufSize)
	if _, st := s.ps.HandleRequest([][]byte{rec.Init}, [][]byte{scratch}); st != fuse.OK {
		s.release()
		return nil, nil, fmt.Errorf("procview: the handed-over INIT: %v", st)
	}
	s.fs.nextFH = rec.NextFH
	for _, h := range rec.Handles {
		s.fs.handles[h.FH] = &handle{node: h.Node, data: h.Data, sysctl: h.Sysctl, write: h.Write}
	}
	return s, func(cfg *Config) {
		if cfg != nil {
			s.fs.v = newView(*cfg)
			s.start()
			return
		}
		s.mu.Lock()
		s.gone = true
		s.mu.Unlock()
		s.release()
	}, nil
}
