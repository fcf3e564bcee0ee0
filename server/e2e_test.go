package server_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// testChildren are the roles this test binary plays as a child that
// files of their own (some for one system only) register.
var testChildren = map[string]func(){}

func TestMain(m *testing.M) {
	if child := testChildren[os.Getenv("UKEYS_TEST_CHILD")]; child != nil {
		child()
		return
	}
	switch os.Getenv("UKEYS_TEST_CHILD") {
	case "search":
		childSearch()
		return
	case "read":
		childRead()
		return
	case "session":
		childSession()
		return
	case "bench":
		childBench()
		return
	case "connect": // connect to UKEYS_SOCKET and exit at once
		if c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET")); err == nil {
			c.Close()
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "hang-helper" && os.Getenv(server.HelperEnv) != "" {
		childHang()
		return
	}
	goleak.VerifyTestMain(m)
}

// childSearch runs in a child process: it connects (presenting whatever
// session its environment carries) and searches its session keyring.
func childSearch() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	id, err := c.Search(keys.SessionKeyring, "user", "shared", 0)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("found", id)
}

// runChild runs this test binary as another process with env added.
func runChild(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"UKEYS_TEST_CHILD=search"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

type daemon struct {
	svc  *keys.Service
	srv  *server.Server
	path string
	d    *ukeystest.Daemon
}

func startDaemon(t *testing.T, opts ...keys.Option) *daemon {
	t.Helper()
	return startDaemonTB(t, opts...)
}

func startDaemonTB(t testing.TB, opts ...keys.Option) *daemon {
	t.Helper()
	return startDaemonCfg(t, server.Config{}, opts...)
}

// startDaemonCfg starts a daemon with cfg, whose read timeout and
// connection bound default to the tests' own.
func startDaemonCfg(t testing.TB, cfg server.Config, opts ...keys.Option) *daemon {
	t.Helper()
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 5 * time.Second
	}
	if cfg.Limits.MaxConnsPerUID == 0 {
		cfg.Limits.MaxConnsPerUID = 64
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithConfig(cfg), ukeystest.WithKeys(opts...))
	return &daemon{svc: d.Service, srv: d.Server, path: d.Socket, d: d}
}

func (d *daemon) dial(t *testing.T) *client.Client {
	t.Helper()
	return d.d.Dial(t)
}

func TestEndToEnd(t *testing.T) {
	d := startDaemon(t)
	c := d.dial(t)
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	id, err := c.AddKey("user", "e2e", []byte("payload"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Read(id)
	if err != nil || string(got) != "payload" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	desc, err := c.Describe(id)
	uid, gid := os.Getuid(), os.Getgid()
	want := "user;" + itoa(uid) + ";" + itoa(gid) + ";3f010000;e2e"
	if err != nil || desc != want {
		t.Fatalf("Describe = %q, %v; want %q", desc, err, want)
	}
	if found, err := c.Search(keys.SessionKeyring, "user", "e2e", 0); err != nil || found != id {
		t.Fatalf("Search = %d, %v", found, err)
	}
	if err := c.Revoke(id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(id); !errors.Is(err, keys.EKEYREVOKED) {
		t.Fatalf("Read after revoke: %v", err)
	}
	if _, err := c.Read(12345); !errors.Is(err, keys.ENOKEY) {
		t.Fatalf("Read missing: %v", err)
	}
	proc, err := c.ProcKeys()
	if err != nil || len(proc) == 0 {
		t.Fatalf("ProcKeys: %q %v", proc, err)
	}
	if st, err := c.Status(); err != nil || len(st) == 0 {
		t.Fatalf("Status: %v", err)
	}
}

func itoa(v int) string {
	return string(appendInt(nil, v))
}

func appendInt(b []byte, v int) []byte {
	if v >= 10 {
		b = appendInt(b, v/10)
	}
	return append(b, byte('0'+v%10))
}

// A process's keyrings belong to it: a second connection of the same
// process shares them, and they go when its last connection closes.
func TestProcessKeyringsFollowProcess(t *testing.T) {
	d := startDaemon(t)
	a := d.dial(t)
	b := d.dial(t)
	pa, err := a.GetKeyringID(keys.ProcessKeyring, true)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.GetKeyringID(keys.ProcessKeyring, false)
	if err != nil || pb != pa {
		t.Fatalf("second connection of the process sees %d, %v; want %d", pb, err, pa)
	}
}

// Sessions cross processes by token only.
func TestSessionToken(t *testing.T) {
	d := startDaemon(t)
	a := d.dial(t)
	if _, err := a.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	id, err := a.AddKey("user", "shared", []byte("s"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.SessionToken()
	if err != nil {
		t.Fatal(err)
	}
	// Asking again gives the same token: the table does not grow with
	// every request of a long-lived session.
	for range 3 {
		if again, err := a.SessionToken(); err != nil || again != tok {
			t.Fatalf("second token %q, %v; first %q", again, err, tok)
		}
	}
	sock := "UKEYS_SOCKET=" + d.path
	// A child of this process inherits its session, as a child inherits
	// its parent's credentials in the kernel: with no token, and with a
	// wrong one, which does not replace what it inherited.
	if out := runChild(t, sock); out != fmt.Sprint("found ", id) {
		t.Fatalf("child without a token: %q, want found %d", out, id)
	}
	if out := runChild(t, sock, client.SessionEnv+"=1:00000000000000000000000000000000"); out != fmt.Sprint("found ", id) {
		t.Fatalf("child with a wrong token: %q, want found %d", out, id)
	}
	// A process that descends from nothing holding the session (here,
	// the session is a holder child's, on a daemon this process never
	// spoke to) gets it only through the token.
	d2 := startDaemon(t)
	sock2 := "UKEYS_SOCKET=" + d2.path
	h := startHolder(t, sock2)
	h.read("child")
	if out := runChild(t, sock2, client.SessionEnv+"="+h.tok); out != fmt.Sprint("found ", h.id) {
		t.Fatalf("a process holding the token: %q, want found %d", out, h.id)
	}
	// A wrong token leaves the process with a revoked session keyring
	// (not a fresh one, where what it adds would be lost).
	if out := runChild(t, sock2, client.SessionEnv+"=1:00000000000000000000000000000000"); !strings.Contains(out, "Key has been revoked") {
		t.Fatalf("a process with a wrong token: %q, want EKEYREVOKED", out)
	}
	if out := runChild(t, sock2); !strings.Contains(out, "Required key not available") {
		t.Fatalf("a process without a token: %q, want ENOKEY", out)
	}
}

// Garbage on the socket, a client vanishing mid-request and a flood of
// connections leave the daemon serving everyone else.
func TestBadClients(t *testing.T) {
	d := startDaemon(t)
	good := d.dial(t)
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff},
		append(wire.EncodeHello(1)[:0:0], []byte{0, 0, 0, 6, 'U', 'K', 'E', 'Y', 0, 1, 0, 0, 0, 3, 1, 2, 3}...),
	} {
		conn, err := net.Dial("unix", d.path)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(junk)
		conn.Close()
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(d.path)
			if err != nil {
				return // refused past the per-uid bound: fine
			}
			c.AddKey("user", "flood", []byte("x"), keys.UserKeyring)
			c.Close()
		}()
	}
	wg.Wait()
	if _, err := good.GetKeyringID(keys.UserKeyring, true); err != nil {
		t.Fatalf("good client after the abuse: %v", err)
	}
}

// Frames larger than a socket buffer go both ways, and the connection
// serves on after them.
func TestLargeFrames(t *testing.T) {
	d := startDaemon(t)
	c := d.dial(t)
	big := make([]byte, 32767) // the largest user key payload
	for i := range big {
		big[i] = byte(i)
	}
	id, err := c.AddKey("user", "big", big, keys.ProcessKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Read(id); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Read of a %d-byte payload: %d bytes, %v", len(big), len(got), err)
	}
	// A request of a megabyte fills the socket; the daemon refuses the
	// payload, not the connection.
	var ce *client.Error
	if err := c.Update(id, make([]byte, 1<<20)); !errors.As(err, &ce) {
		t.Fatalf("Update with a 1 MiB payload: %v, want an errno from the daemon", err)
	}
	if got, err := c.Read(id); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Read after the large request: %d bytes, %v", len(got), err)
	}
}

// A version 1 client may keep several requests in flight: each is
// answered, whether the next arrives with the one before or while it is
// being served. Version 2 is agreed only with a client that asks for it.
func TestPipelining(t *testing.T) {
	d := startDaemon(t)
	hello := func(conn net.Conn, v uint16) uint16 {
		t.Helper()
		if err := wire.WriteFrame(conn, wire.EncodeHello(v)); err != nil {
			t.Fatal(err)
		}
		b, err := wire.ReadFrame(conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodeHello(b)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, v := range []uint16{2, 3, 7} {
		conn, err := net.Dial("unix", d.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := hello(conn, v); got != min(v, wire.Version) {
			t.Fatalf("client hello %d: server agreed on %d, want %d", v, got, min(v, wire.Version))
		}
		conn.Close()
	}
	conn, err := net.Dial("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := hello(conn, 1); got != 1 {
		t.Fatalf("client hello 1: server agreed on %d", got)
	}
	frame := func(tag uint32) []byte {
		body, _ := wire.AppendRequest(nil, &wire.Request{Tag: tag, Op: wire.OpGetKeyringID, Ints: []int64{int64(keys.UserKeyring), 1}})
		f, _ := wire.AppendFrame(nil, body)
		return f
	}
	// Two requests always in flight: each answer read sends the next
	// request, which then tends to arrive while the daemon answers the
	// one before. A request the daemon failed to notice would stall until
	// the read deadline closes the connection.
	br := bufio.NewReader(conn)
	conn.Write(append(frame(1), frame(2)...))
	for tag := uint32(1); tag <= 2000; tag++ {
		b, err := wire.ReadFrame(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", tag, err)
		}
		r, err := wire.DecodeResponse(b)
		if err != nil || r.Tag != tag || r.Errno != 0 {
			t.Fatalf("answer %d: %+v, %v", tag, r, err)
		}
		if tag+2 <= 2000 {
			conn.Write(frame(tag + 2))
		}
	}
	// A burst in one write is answered whole and in order (the daemon
	// gathers the answers of requests it already holds into one write).
	var burst []byte
	for tag := uint32(3000); tag < 3064; tag++ {
		burst = append(burst, frame(tag)...)
	}
	conn.Write(burst)
	for tag := uint32(3000); tag < 3064; tag++ {
		b, err := wire.ReadFrame(br, nil)
		if err != nil {
			t.Fatalf("burst answer %d: %v", tag, err)
		}
		if r, err := wire.DecodeResponse(b); err != nil || r.Tag != tag || r.Errno != 0 {
			t.Fatalf("burst answer %d: %+v, %v", tag, r, err)
		}
	}
	// An answer gathered for a later write does not wait behind a request
	// that waits: here for a notification on a watched keyring, which
	// never comes.
	conn.Write(frame(3999))
	b, err := wire.ReadFrame(br, nil)
	r, derr := wire.DecodeResponse(b)
	if err != nil || derr != nil || len(r.Ints) != 1 {
		t.Fatalf("user keyring: %+v, %v, %v", r, err, derr)
	}
	watch, _ := wire.AppendRequest(nil, &wire.Request{Tag: 3998, Op: wire.OpWatchKey, Ints: []int64{r.Ints[0], 1}})
	watchFrame, _ := wire.AppendFrame(nil, watch)
	conn.Write(watchFrame)
	if b, err = wire.ReadFrame(br, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := wire.DecodeResponse(b); err != nil || r.Errno != 0 {
		t.Fatalf("watch: %+v, %v", r, err)
	}
	next, _ := wire.AppendRequest(nil, &wire.Request{Tag: 4001, Op: wire.OpWatchNext})
	nextFrame, _ := wire.AppendFrame(nil, next)
	conn.Write(append(frame(4000), nextFrame...))
	// The wait is bounded at 2 s: an answer held behind it would come late.
	conn.SetReadDeadline(time.Now().Add(time.Second))
	if b, err = wire.ReadFrame(br, nil); err != nil {
		t.Fatalf("answer before a waiting request: %v", err)
	}
	if r, err := wire.DecodeResponse(b); err != nil || r.Tag != 4000 {
		t.Fatalf("answer before a waiting request: %+v, %v", r, err)
	}
	// A change to the keyring ends the wait.
	other, err := client.Dial(d.path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.AddKey("user", "wake", []byte("x"), keys.UserKeyring); err != nil {
		t.Fatal(err)
	}
	if b, err = wire.ReadFrame(br, nil); err != nil {
		t.Fatalf("notification: %v", err)
	}
	if r, err := wire.DecodeResponse(b); err != nil || r.Tag != 4001 || r.Errno != 0 {
		t.Fatalf("notification: %+v, %v", r, err)
	}
}

// OpIntercept takes a seccomp listener passed with the request, and
// nothing else: another descriptor, or none, is EINVAL, and the
// connection goes on.
func TestInterceptRefusesOtherDescriptors(t *testing.T) {
	d := startDaemon(t)
	c := d.dial(t)
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := c.Intercept(p[0]); !errors.Is(err, keys.EINVAL) {
		t.Fatalf("a pipe: %v, want EINVAL", err)
	}
	if _, err := c.GetKeyringID(keys.UserKeyring, true); err != nil {
		t.Fatalf("the connection after: %v", err)
	}
}
