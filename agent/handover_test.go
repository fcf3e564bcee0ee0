package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// header is a section's header naming a container's own namespace
// (its init by pidfd), a container known by pid, and a pod of two
// containers and one gone, with 9 descriptors: a listening socket, the
// namespaces' states' 1-2, 4, 5, the inits' 3, 6, 8, the pod's pin 7.
func header() sectionHeader {
	return sectionHeader{Version: HandoverVersion, Listeners: 1, Namespaces: []nsRecord{
		{FD: 1, FDs: 2, Members: []memberRecord{{ID: "a", Init: 3, Tag: "ta", Listeners: 1}}},
		{FD: 4, FDs: 0, Members: []memberRecord{{ID: "b", Init: -1, PID: 42, Start: "123"}}},
		{FD: 4, FDs: 2, Sandbox: "pod", Pod: &podRecord{PodRecord: container.PodRecord{}, FD: 7}, Members: []memberRecord{
			{ID: "p1", Init: 6, Tag: "t1", Listeners: 2},
			{ID: "p2", Init: 8, Tag: "t2", Listeners: 1},
			{ID: "a", Init: -1, Tag: "t3", Listeners: 1, Gone: true},
		}},
	}}
}

// The section's header reads back as written, and a header that names a
// descriptor out of range or twice, a container twice or without an id
// or init, a sandbox twice or without its pod's binding, a pod's
// members' listeners by no tag or one tag, or a later version, is
// refused. A version 1 header (a container per namespace) reads as one
// member each.
func TestSectionHeader(t *testing.T) {
	h := header()
	var buf bytes.Buffer
	if err := writeHeader(&buf, &h); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("what follows")
	got, err := readHeader(&buf, 9)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, h) {
		t.Fatalf("read back %+v, wrote %+v", got, h)
	}
	if buf.String() != "what follows" {
		t.Fatalf("the header read %q of what follows it", buf.String())
	}

	bad := map[string]func(h *sectionHeader){
		"a later version":              func(h *sectionHeader) { h.Version = HandoverVersion + 1 },
		"no version":                   func(h *sectionHeader) { h.Version = 0 },
		"more listeners than fds":      func(h *sectionHeader) { h.Listeners = 10 },
		"a namespace's fds overlap":    func(h *sectionHeader) { h.Namespaces[0].FD = 0 },
		"init out of range":            func(h *sectionHeader) { h.Namespaces[0].Members[0].Init = 9 },
		"init named twice":             func(h *sectionHeader) { h.Namespaces[0].Members[0].Init = 2 },
		"negative count":               func(h *sectionHeader) { h.Namespaces[0].FDs = -1 },
		"an id twice":                  func(h *sectionHeader) { h.Namespaces[1].Members[0].ID = "a" },
		"an id twice in a pod":         func(h *sectionHeader) { h.Namespaces[2].Members[1].ID = "p1" },
		"no id":                        func(h *sectionHeader) { h.Namespaces[1].Members[0].ID = "" },
		"no init, no pid":              func(h *sectionHeader) { h.Namespaces[1].Members[0].PID = 0 },
		"an overflowing range":         func(h *sectionHeader) { h.Namespaces[1].FD, h.Namespaces[1].FDs = 1<<62, 1<<62 },
		"negative listeners":           func(h *sectionHeader) { h.Listeners = -1 },
		"a range past the descriptors": func(h *sectionHeader) { h.Namespaces[1].FD, h.Namespaces[1].FDs = 9, 1 },
		"no members":                   func(h *sectionHeader) { h.Namespaces[1].Members = nil },
		"two members, no pod":          func(h *sectionHeader) { h.Namespaces[2].Sandbox, h.Namespaces[2].Pod = "", nil },
		"a sandbox, no pod":            func(h *sectionHeader) { h.Namespaces[2].Pod = nil },
		"a pod, no sandbox":            func(h *sectionHeader) { h.Namespaces[2].Sandbox = "" },
		"a sandbox twice": func(h *sectionHeader) {
			h.Namespaces[1].Sandbox, h.Namespaces[1].Pod = "pod", &podRecord{FD: 4}
		},
		"the pin out of range":       func(h *sectionHeader) { h.Namespaces[2].Pod.FD = 9 },
		"the pin named twice":        func(h *sectionHeader) { h.Namespaces[2].Pod.FD = 6 },
		"a tag twice":                func(h *sectionHeader) { h.Namespaces[2].Members[1].Tag = "t1" },
		"no tag in a pod":            func(h *sectionHeader) { h.Namespaces[2].Members[0].Tag = "" },
		"a gone container's init":    func(h *sectionHeader) { h.Namespaces[2].Members[2].Init = 5 },
		"a pod member's init, twice": func(h *sectionHeader) { h.Namespaces[2].Members[1].Init = 6 },
	}
	for name, change := range bad {
		hh := header()
		change(&hh)
		var b bytes.Buffer
		writeHeader(&b, &hh)
		if _, err := readHeader(&b, 9); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A header longer than it may be is refused before it is read.
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], maxHeader+1)
	if _, err := readHeader(bytes.NewReader(n[:]), 0); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("an oversized header: %v", err)
	}

	// Version 1, as the first daemons with the section wrote it.
	v1 := `{"version":1,"listeners":1,"namespaces":[` +
		`{"id":"a","who":{"pid_dev":0,"pid_ino":0},"init":3,"fd":1,"fds":2},` +
		`{"id":"b","who":{"pid_dev":0,"pid_ino":0},"init":-1,"pid":42,"start":"123","fd":4,"fds":0}]}`
	var b1 bytes.Buffer
	binary.Write(&b1, binary.BigEndian, uint32(len(v1)))
	b1.WriteString(v1)
	got, err = readHeader(&b1, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := sectionHeader{Version: 1, Listeners: 1, Namespaces: []nsRecord{
		{FD: 1, FDs: 2, Members: []memberRecord{{ID: "a", Init: 3}}},
		{FD: 4, Members: []memberRecord{{ID: "b", Init: -1, PID: 42, Start: "123"}}},
	}}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("version 1 read as %+v, want %+v", got, want)
	}
}

// sectionSeeds are sections the fuzzer starts from: none, one naming a
// container by pid whose state is an empty server's, a pod of two
// containers and one gone, pinned by descriptor 0 (which does not come:
// the fuzzer sends none, and the header is refused for it; a start for
// mutations), and the version 1 one of the same container.
func sectionSeeds(t testing.TB) [][]byte {
	var empty bytes.Buffer
	writeHeader(&empty, &sectionHeader{Version: HandoverVersion})
	state := func(w io.Writer) {
		svc := keys.New()
		defer svc.Close()
		if _, err := server.New(svc, server.Config{}).Freeze(w); err != nil {
			t.Fatal(err)
		}
	}
	var one bytes.Buffer
	writeHeader(&one, &sectionHeader{Version: HandoverVersion, Namespaces: []nsRecord{
		{Members: []memberRecord{{ID: "a", Init: -1, PID: 1, Start: "1", Tag: "t"}}}}})
	state(&one)
	var pod bytes.Buffer
	writeHeader(&pod, &sectionHeader{Version: HandoverVersion, Namespaces: []nsRecord{
		{Sandbox: "s", Pod: &podRecord{PodRecord: container.PodRecord{}}, Members: []memberRecord{
			{ID: "a", Init: -1, PID: 1, Start: "1", Tag: "t1", Listeners: 1},
			{ID: "b", Init: -1, PID: 1, Start: "1", Tag: "t2", Listeners: 2},
			{ID: "c", Init: -1, Tag: "t3", Gone: true},
		}}}})
	state(&pod)
	var v1 bytes.Buffer
	h1 := `{"version":1,"listeners":0,"namespaces":[{"id":"a","who":{"pid_dev":0,"pid_ino":0},"init":-1,"pid":1,"start":"1","fd":0,"fds":0}]}`
	binary.Write(&v1, binary.BigEndian, uint32(len(h1)))
	v1.WriteString(h1)
	state(&v1)
	return [][]byte{empty.Bytes(), one.Bytes(), pod.Bytes(), v1.Bytes()}
}

// The section is hostile input when it comes from systemd's store: read
// by a fresh agent, whatever it holds, it is refused or taken without a
// panic, and what is taken is let go.
func FuzzAgentSection(f *testing.F) {
	for _, s := range sectionSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a := New(Config{})
		start, err := a.TakeOver(bytes.NewReader(b), nil)
		if err == nil {
			start(false)
		}
	})
}
