package procfs

import (
	"bytes"
	"strconv"
)

// Status is what the daemon reads of a task in /proc/<pid>/status.
type Status struct {
	Tgid int // the thread group (process) the task belongs to
	// UIDs and GIDs are the real, effective, saved and filesystem ids.
	UIDs, GIDs [4]uint32
	Groups     []uint32 // supplementary
	Threads    int      // how many threads its process has
	// CapEff is the effective capability set (bit n for capability n),
	// where the kernel shows one (HasCapEff).
	CapEff    uint64
	HasCapEff bool
}

// ParseStatus parses the text of a status file. It needs the Uid, Gid
// and Threads lines; Tgid, Groups and CapEff are read where present. An
// intercepted call parses one, so it allocates nothing but the groups,
// and stops once it has every line it reads (CapEff comes halfway).
func ParseStatus(b []byte) (Status, bool) {
	var st Status
	seen := 0
	var tgid, groups bool
	for len(b) > 0 && !(seen == 3 && tgid && groups && st.HasCapEff) {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch string(name) {
		case "Uid", "Gid":
			dst := &st.UIDs
			if string(name) == "Gid" {
				dst = &st.GIDs
			}
			for i := range dst {
				var f []byte
				if f, rest = nextField(rest); f == nil {
					return Status{}, false
				}
				v, err := strconv.ParseUint(string(f), 10, 32)
				if err != nil {
					return Status{}, false
				}
				dst[i] = uint32(v)
			}
			seen++
		case "Groups":
			for {
				var g []byte
				if g, rest = nextField(rest); g == nil {
					break
				}
				v, err := strconv.ParseUint(string(g), 10, 32)
				if err != nil {
					return Status{}, false
				}
				st.Groups = append(st.Groups, uint32(v))
			}
			groups = true
		case "Threads", "Tgid":
			n, err := strconv.Atoi(string(bytes.TrimSpace(rest)))
			if err != nil || n < 1 {
				return Status{}, false
			}
			if string(name) == "Tgid" {
				st.Tgid, tgid = n, true
			} else {
				st.Threads = n
				seen++
			}
		case "CapEff":
			caps, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 16, 64)
			if err != nil {
				return Status{}, false
			}
			st.CapEff, st.HasCapEff = caps, true
		}
	}
	return st, seen == 3
}

// nextField returns the first field of b (separated by spaces and tabs,
// as the kernel writes them) and what follows it; nil where there is
// none.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) == 0 {
		return nil, nil
	}
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

// ReadStatus reads and parses /proc/<pid>/status.
func ReadStatus(pid int) (Status, bool) {
	b, err := ReadFile(statusPath(pid))
	if err != nil {
		return Status{}, false
	}
	return ParseStatus(b)
}
