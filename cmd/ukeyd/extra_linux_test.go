package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/procview"
	"github.com/ukeys/ukeys/ukeystest"
)

// hostFiles is a procview.Config whose host readers see a store holding
// one user key, desc.
func hostFiles(t *testing.T, desc string) procview.Config {
	t.Helper()
	svc := keys.New()
	t.Cleanup(func() { svc.Close() })
	c := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	t.Cleanup(c.Release)
	if _, err := c.AddKey("user", desc, []byte("v"), keys.UserKeyring); err != nil {
		t.Fatal(err)
	}
	ns := procview.Namespace{Keys: svc, ProcKeys: func(cred keys.Cred, tid int) (string, error) {
		r := svc.NewCaller(cred)
		defer r.Release()
		return r.ProcKeysAs(cred), nil
	}}
	return procview.Config{Host: &ns, Lookup: func(int) (procview.Namespace, bool) { return procview.Namespace{}, false }}
}

// newAgent is an agent serving no runtime, shut down when the test ends.
func newAgent(t *testing.T) *agent.Agent {
	a := agent.New(agent.Config{Logger: discard})
	t.Cleanup(func() { a.Shutdown(context.Background()) })
	return a
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// dupAll copies the descriptors a hand-over sends, as the server's
// hand-over gives the next daemon copies of the old one's.
func dupAll(t *testing.T, fds []int) []int {
	t.Helper()
	var out []int
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// closed says whether every one of fds is closed.
func closed(fds []int) bool {
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			return false
		}
	}
	return true
}

// The daemon's section of a hand-over carries the /proc files and the
// agent's containers to the next daemon, which serves the same mount;
// without the files (no -proc-dir, or a daemon from before the files
// went with hand-overs) it is the agent's section alone, and read as
// such by a daemon that has the files: it mounts them afresh.
func TestExtraSectionRoundTrip(t *testing.T) {
	ukeystest.NeedRoot(t, "mounting the /proc files (FUSE)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	read := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "keys"))
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	pv, err := procview.Mount(dir, hostFiles(t, "key-of-the-old"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pv.Close() })
	var st unix.Stat_t
	unix.Stat(dir, &st)

	old := &extra{ag: newAgent(t), pv: &pv, log: discard}
	var b bytes.Buffer
	fds, done, err := old.handOver(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("UKX\x01\x03")) || len(fds) != 1 {
		t.Fatalf("the section with the files and the agent's: % x..., %d descriptors", b.Bytes()[:min(b.Len(), 5)], len(fds))
	}
	var next *procview.Server
	nx := &extra{ag: newAgent(t), pv: &next, log: discard}
	start, err := nx.takeOver(&b, dupAll(t, fds))
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("%d bytes of the section left unread", b.Len())
	}
	done(true)
	start(true)
	if next = nx.files(dir, hostFiles(t, "key-of-the-new")); next == nil {
		t.Fatal("the files handed over are not served")
	}
	t.Cleanup(func() { next.Close() })
	if got := read(); !strings.Contains(got, "key-of-the-new") {
		t.Errorf("the files after the hand-over: %q", got)
	}
	if err := pv.Close(); err != nil || !strings.Contains(read(), "key-of-the-new") {
		t.Errorf("the old daemon's Close took the files handed over: %v %q", err, read())
	}
	var now unix.Stat_t
	if unix.Stat(dir, &now); now.Dev != st.Dev || now.Ino != st.Ino {
		t.Errorf("the mount changed across the hand-over")
	}

	// The agent's section alone, as a daemon without the files writes
	// it, and as daemons wrote it before they went with hand-overs.
	var none *procview.Server
	for name, w := range map[string]func(io.Writer) ([]int, func(bool), error){
		"without -proc-dir": (&extra{ag: newAgent(t), pv: &none, log: discard}).handOver,
		"an older daemon":   newAgent(t).HandOver,
	} {
		b.Reset()
		fds, done, err := w(&b)
		if err != nil {
			t.Fatal(name, err)
		}
		if bytes.HasPrefix(b.Bytes(), []byte("UKX")) {
			t.Errorf("%s: the files' marker without the files", name)
		}
		var taken *procview.Server
		nx := &extra{ag: newAgent(t), pv: &taken, log: discard}
		start, err := nx.takeOver(&b, dupAll(t, fds))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		done(true)
		start(true)
		if s := nx.files(dir, hostFiles(t, "key-of-a-fresh-one")); s != nil {
			t.Errorf("%s: files taken over from a section without them", name)
		}
	}

	// Files handed over for another directory than the next daemon's
	// -proc-dir are let go of, and the old mount detached.
	b.Reset()
	fds, done, err = (&extra{pv: &next, log: discard}).handOver(&b)
	if err != nil || !bytes.HasPrefix(b.Bytes(), []byte("UKX\x01\x01")) {
		t.Fatalf("the section with the files alone: %v % x", err, b.Bytes()[:min(b.Len(), 5)])
	}
	var elsewhere *procview.Server
	nx = &extra{pv: &elsewhere, log: discard}
	dups := dupAll(t, fds)
	if start, err = nx.takeOver(&b, dups); err != nil {
		t.Fatal(err)
	}
	done(true)
	start(true)
	if s := nx.files(t.TempDir(), hostFiles(t, "key-of-elsewhere")); s != nil {
		t.Error("files of another directory taken over")
	}
	if !closed(dups) {
		t.Error("the connection of files let go of is still open")
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.FUSE_SUPER_MAGIC {
		t.Error("the files let go of are still mounted")
	}
}

// filesSection is a /proc files' part as procview.Server.HandOver
// writes it, for dir, of version v.
func filesSection(v int, dir string) []byte {
	init := make([]byte, 104) // fuse.InitIn: the header, then 7.31
	binary.LittleEndian.PutUint32(init[0:], 104)
	binary.LittleEndian.PutUint32(init[4:], 26) // FUSE_INIT
	binary.LittleEndian.PutUint64(init[8:], 2)
	binary.LittleEndian.PutUint32(init[40:], 7)
	binary.LittleEndian.PutUint32(init[44:], 31)
	rec, _ := json.Marshal(map[string]any{"version": v, "dir": dir, "ino": uint64(1) << 63, "init": init, "next_fh": 0})
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(rec))), rec...)
}

// agentSection is an agent's section with no containers, as an agent
// serving none writes it.
func agentSection(t testing.TB) []byte {
	t.Helper()
	a := agent.New(agent.Config{Logger: discard})
	defer a.Shutdown(context.Background())
	var b bytes.Buffer
	fds, done, err := a.HandOver(&b)
	if err != nil || len(fds) != 0 {
		t.Fatal(fds, err)
	}
	done(true)
	return b.Bytes()
}

// sectionFDs are descriptors for a section: /dev/fuse's (the files' part
// needs one it can poll), then /dev/null's.
func sectionFDs(t testing.TB, n int) []int {
	t.Helper()
	var fds []int
	for i := range n {
		path := "/dev/null"
		if i == 0 {
			path = "/dev/fuse"
		}
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Skipf("needs %s: %v", path, err)
		}
		fds = append(fds, fd)
	}
	return fds
}

// A section the next daemon cannot read whole is refused, whichever part
// is wrong, and each descriptor that came with it closed: the files'
// connection with the rest (the old daemon serves on with its own).
func TestExtraSectionRefused(t *testing.T) {
	dir := "/run/ukeys-proc"
	files, ag := filesSection(1, dir), agentSection(t)
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	head := func(parts byte) []byte { return []byte{'U', 'K', 'X', 1, parts} }
	// The good ones first: what the bad ones are made of is read.
	// A daemon without the agent drops the agent's part, descriptors
	// and all.
	for i, good := range [][]byte{cat(head(3), files, ag), cat(head(1), files), ag, cat(head(3), files, ag), ag} {
		var pv *procview.Server
		x := &extra{ag: newAgent(t), pv: &pv, log: discard}
		if i >= 3 {
			x.ag = nil
		}
		fds := sectionFDs(t, 2)
		start, err := x.takeOver(bytes.NewReader(good), fds)
		if err != nil {
			t.Fatalf("% x: %v", good[:5], err)
		}
		start(false)
		if !closed(fds) {
			t.Errorf("% x: descriptors left open after a section let go of", good[:5])
		}
	}
	for name, b := range map[string][]byte{
		"empty":                     nil,
		"a truncated marker":        []byte("UKX"),
		"no parts":                  []byte("UKX\x01"),
		"no files' part":            cat(head(2), ag),
		"no parts at all":           cat(head(0)),
		"a truncated files' part":   cat(head(3), files[:len(files)/2]),
		"a files' part too large":   cat(head(1), []byte{0xff, 0xff, 0xff, 0xff}),
		"a files' part not JSON":    cat(head(1), []byte{0, 0, 0, 3}, []byte("{{{")),
		"a later files' part":       cat(head(1), filesSection(procview.HandoverVersion+1, dir)),
		"files without a directory": cat(head(1), filesSection(1, "")),
		"a truncated agent's part":  cat(head(3), files, ag[:len(ag)-1]),
		"an agent's part garbled":   cat(head(3), files, []byte{0, 0, 0, 2}, []byte("{]")),
		"an old section garbled":    []byte{0, 0, 0, 4, 'n', 'u', 'l', 'x'},
		"an old section truncated":  ag[:len(ag)/2],
	} {
		var pv *procview.Server
		x := &extra{ag: newAgent(t), pv: &pv, log: discard}
		fds := sectionFDs(t, 2)
		if _, err := x.takeOver(bytes.NewReader(b), fds); err == nil {
			t.Errorf("%s: taken over", name)
		}
		if !closed(fds) {
			t.Errorf("%s: descriptors left open", name)
			closeFDs(fds)
		}
	}
	// A garbled length (the fuzzer's) costs no more than the bytes there.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	fds := sectionFDs(t, 1)
	var pv1 *procview.Server
	if _, err := (&extra{pv: &pv1, log: discard}).takeOver(bytes.NewReader([]byte("UKX\x01\x01\x3f\xff\xff\xff{}")), fds); err == nil || !closed(fds) {
		t.Errorf("a files' part of a gibibyte with two bytes: %v, descriptors closed %v", err, closed(fds))
	}
	runtime.ReadMemStats(&ms)
	if got := ms.TotalAlloc - before; got > 1<<20 {
		t.Errorf("a files' part of a gibibyte with two bytes allocated %d bytes", got)
	}
	// A files' part needs its connection.
	var pv *procview.Server
	if _, err := (&extra{pv: &pv, log: discard}).takeOver(bytes.NewReader(cat(head(1), files)), nil); err == nil {
		t.Error("a files' part without its descriptor: taken over")
	}
}

// The section comes from systemd's store after a restart: whatever it
// holds, the next daemon refuses it or takes it, without a panic, and
// what it took it lets go of entirely.
func FuzzExtraSection(f *testing.F) {
	files, ag := filesSection(1, "/run/ukeys-proc"), agentSection(f)
	f.Add(append(append([]byte("UKX\x01\x03"), files...), ag...))
	f.Add(append([]byte("UKX\x01\x01"), files...))
	f.Add(ag)
	f.Add([]byte("UKX\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var pv *procview.Server
		x := &extra{ag: agent.New(agent.Config{Logger: discard}), pv: &pv, log: discard}
		defer x.ag.Shutdown(context.Background())
		fds := sectionFDs(t, 2)
		start, err := x.takeOver(bytes.NewReader(b), fds)
		if err == nil {
			start(false)
		}
		if !closed(fds) {
			t.Errorf("descriptors left open (err %v)", err)
			closeFDs(fds)
		}
	})
}

// mountedAt reports whether a mount is at dir (/proc/self/mountinfo's
// fifth field).
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// A daemon that takes over without -proc-dir and without the seccomp
// agent lets the handed-over files' mount go, as one with the agent
// does (extra.files): otherwise the old daemon's mount stays, every read
// of it ENOTCONN, its connection gone with the old daemon.
func TestTakeoverWithoutProcDirLetsTheFilesGo(t *testing.T) {
	ukeystest.NeedRoot(t, "mounting the /proc files (FUSE)")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { procview.Detach(dir) })
	socket := filepath.Join(t.TempDir(), "ukeyd.sock")
	old := startChild(t, socket, childOpts{args: []string{"-proc-dir", dir}})
	if _, err := os.ReadFile(filepath.Join(dir, "keys")); err != nil {
		t.Fatalf("the old daemon's files: %v\n%s", err, old.stderrText())
	}
	nu := startChild(t, socket, childOpts{args: []string{"-takeover"}})
	if code := old.wait(t); code != 0 {
		t.Fatalf("the old daemon exited %d\n%s", code, old.stderrText())
	}
	if mountedAt(t, dir) {
		_, err := os.ReadFile(filepath.Join(dir, "keys"))
		t.Errorf("the files handed over to a daemon without -proc-dir are still mounted (a read: %v)\n%s", err, nu.stderrText())
	}
}
