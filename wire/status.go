package wire

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NamespaceStatus is what the daemon's status ([OpStatus]) says of one
// key namespace of the seccomp agent's: a pod's or a container's, its
// containers and what it holds and has served. The daemon says it only
// to a caller as privileged as itself.
type NamespaceStatus struct {
	// Kind is "pod" (ID its sandbox's id) or "container" (ID the
	// container's).
	Kind string
	ID   string
	// Containers are the ids of the containers in it.
	Containers []string
	// Keys and Bytes are what its keys hold of its share (as maxkeys and
	// maxbytes count them); Processes the processes it keeps.
	Keys, Bytes, Processes int
	// Calls are the intercepted calls it has served, Refusals those of
	// them refused for permission, a quota or a bound (EACCES, EPERM,
	// EDQUOT, EMFILE, ENFILE).
	Calls, Refusals uint64
}

// The status's lines of the namespaces: "namespaces: N", then one
// "namespace:" line each. A status without them (an older daemon's, or
// for an unprivileged caller) has none, and an older client shows them
// as the other "name: value" lines.
const (
	statusNamespaces = "namespaces: "
	statusNamespace  = "namespace: "
)

// AppendNamespaces appends the status lines of nss to b: "namespaces:
// N", then for each a line
//
//	namespace: pod=ID keys=K bytes=B processes=P calls=C refusals=R containers=ID,ID
//
// (container=ID for a container's own), an id quoted as Go quotes a
// string where it holds anything but letters, digits and ._:@+-/.
func AppendNamespaces(b []byte, nss []NamespaceStatus) []byte {
	b = fmt.Appendf(b, "%s%d\n", statusNamespaces, len(nss))
	for _, ns := range nss {
		b = fmt.Appendf(b, "%s%s=%s keys=%d bytes=%d processes=%d calls=%d refusals=%d containers=", statusNamespace,
			statusWord(ns.Kind), statusWord(ns.ID), ns.Keys, ns.Bytes, ns.Processes, ns.Calls, ns.Refusals)
		for i, c := range ns.Containers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, statusWord(c)...)
		}
		b = append(b, '\n')
	}
	return b
}

// statusWord is s as is where it is a plain word, else quoted.
func statusWord(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:@+-/", r))
	}) {
		return strconv.Quote(s)
	}
	return s
}

// ParseNamespaces returns the namespaces a status text lists, and
// whether it lists them at all (a daemon without a seccomp agent, an
// older one, or one answering a caller less privileged than itself
// does not). A line it cannot read is an error.
func ParseNamespaces(status string) ([]NamespaceStatus, bool, error) {
	var nss []NamespaceStatus
	listed, want := false, 0
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, statusNamespaces); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				return nil, false, fmt.Errorf("wire: status: %q", line)
			}
			listed, want = true, n
			continue
		}
		rest, ok := strings.CutPrefix(line, statusNamespace)
		if !ok {
			continue
		}
		ns, err := parseNamespace(rest)
		if err != nil {
			return nil, false, fmt.Errorf("wire: status: %q: %w", line, err)
		}
		nss = append(nss, ns)
	}
	if listed && len(nss) != want {
		return nil, false, fmt.Errorf("wire: status: %d namespaces listed, %d said", len(nss), want)
	}
	return nss, listed, nil
}

// statusNumbers are the fields of a namespace's line that hold one
// number.
var statusNumbers = []string{"keys", "bytes", "processes", "calls", "refusals"}

// parseNamespace reads one namespace line's fields; any field may hold
// a list (words separated by commas), so that a newer daemon's may.
func parseNamespace(s string) (NamespaceStatus, error) {
	var ns NamespaceStatus
	first := true
	for s != "" {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsRune(key, ' ') {
			return ns, fmt.Errorf("no field at %q", s)
		}
		s = rest
		var vals []string
		for {
			v, rest, err := cutStatusWord(s)
			if err != nil {
				return ns, err
			}
			vals, s = append(vals, v), rest
			if !strings.HasPrefix(s, ",") {
				break
			}
			s = s[1:]
		}
		if s != "" {
			if s[0] != ' ' {
				return ns, fmt.Errorf("no space at %q", s)
			}
			s = s[1:]
		}
		num := func(p *int) (err error) {
			*p, err = strconv.Atoi(vals[0])
			return err
		}
		unum := func(p *uint64) (err error) {
			*p, err = strconv.ParseUint(vals[0], 10, 64)
			return err
		}
		var err error
		if len(vals) > 1 && key != "containers" && (first || slices.Contains(statusNumbers, key)) {
			return ns, fmt.Errorf("%s: a list", key)
		}
		switch {
		case first:
			if key != "pod" && key != "container" {
				return ns, fmt.Errorf("kind %q", key)
			}
			ns.Kind, ns.ID = key, vals[0]
		case key == "keys":
			err = num(&ns.Keys)
		case key == "bytes":
			err = num(&ns.Bytes)
		case key == "processes":
			err = num(&ns.Processes)
		case key == "calls":
			err = unum(&ns.Calls)
		case key == "refusals":
			err = unum(&ns.Refusals)
		case key == "containers":
			if len(vals) > 1 || vals[0] != "" {
				ns.Containers = slices.Clone(vals)
			}
		}
		// A field this client does not know (a newer daemon's) is
		// skipped.
		if err != nil {
			return ns, fmt.Errorf("%s: %w", key, err)
		}
		first = false
	}
	if ns.Kind == "" {
		return ns, fmt.Errorf("no kind")
	}
	return ns, nil
}

// cutStatusWord cuts a word (statusWord) from the front of s: a quoted
// one, or one up to a space or a comma.
func cutStatusWord(s string) (word, rest string, err error) {
	if strings.HasPrefix(s, `"`) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return "", s, err
		}
		w, err := strconv.Unquote(q)
		return w, s[len(q):], err
	}
	i := strings.IndexAny(s, " ,")
	if i < 0 {
		return s, "", nil
	}
	return s[:i], s[i:], nil
}
