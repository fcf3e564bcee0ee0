package agent

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/container"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// The section's header reads back as written, and a header that names a
// descriptor out of range or twice, a namespace twice or without an id
// or init, or a later version, is refused.
func TestSectionHeader(t *testing.T) {
	h := sectionHeader{Version: HandoverVersion, Listeners: 1, Namespaces: []nsRecord{
		{ID: "a", Who: container.Record{}, Init: 3, FD: 1, FDs: 2},
		{ID: "b", Init: -1, PID: 42, Start: "123", FD: 4, FDs: 0},
	}}
	var buf bytes.Buffer
	if err := writeHeader(&buf, &h); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("what follows")
	got, err := readHeader(&buf, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got.Listeners != 1 || len(got.Namespaces) != 2 || got.Namespaces[0] != h.Namespaces[0] || got.Namespaces[1] != h.Namespaces[1] {
		t.Fatalf("read back %+v, wrote %+v", got, h)
	}
	if buf.String() != "what follows" {
		t.Fatalf("the header read %q of what follows it", buf.String())
	}

	bad := map[string]func(h *sectionHeader){
		"a later version":              func(h *sectionHeader) { h.Version = HandoverVersion + 1 },
		"no version":                   func(h *sectionHeader) { h.Version = 0 },
		"more listeners than fds":      func(h *sectionHeader) { h.Listeners = 5 },
		"a namespace's fds overlap":    func(h *sectionHeader) { h.Namespaces[0].FD = 0 },
		"init out of range":            func(h *sectionHeader) { h.Namespaces[0].Init = 4 },
		"init named twice":             func(h *sectionHeader) { h.Namespaces[0].Init = 2 },
		"negative count":               func(h *sectionHeader) { h.Namespaces[0].FDs = -1 },
		"an id twice":                  func(h *sectionHeader) { h.Namespaces[1].ID = "a" },
		"no id":                        func(h *sectionHeader) { h.Namespaces[1].ID = "" },
		"no init, no pid":              func(h *sectionHeader) { h.Namespaces[1].PID = 0 },
		"an overflowing range":         func(h *sectionHeader) { h.Namespaces[1].FD, h.Namespaces[1].FDs = 1<<62, 1<<62 },
		"negative listeners":           func(h *sectionHeader) { h.Listeners = -1 },
		"a range past the descriptors": func(h *sectionHeader) { h.Namespaces[1].FD, h.Namespaces[1].FDs = 4, 1 },
	}
	for name, change := range bad {
		hh := h
		hh.Namespaces = append([]nsRecord(nil), h.Namespaces...)
		change(&hh)
		var b bytes.Buffer
		writeHeader(&b, &hh)
		if _, err := readHeader(&b, 4); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A header longer than it may be is refused before it is read.
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], maxHeader+1)
	if _, err := readHeader(bytes.NewReader(n[:]), 0); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("an oversized header: %v", err)
	}
}

// sectionSeeds are sections the fuzzer starts from: none, one naming a
// namespace by pid whose state is an empty server's.
func sectionSeeds(t testing.TB) [][]byte {
	var empty bytes.Buffer
	writeHeader(&empty, &sectionHeader{Version: HandoverVersion})
	var one bytes.Buffer
	writeHeader(&one, &sectionHeader{Version: HandoverVersion, Namespaces: []nsRecord{{ID: "a", Init: -1, PID: 1, Start: "1"}}})
	svc := keys.New()
	defer svc.Close()
	if _, err := server.New(svc, server.Config{}).Freeze(&one); err != nil {
		t.Fatal(err)
	}
	return [][]byte{empty.Bytes(), one.Bytes()}
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
