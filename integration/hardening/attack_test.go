package hardening

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// A session token lets processes of the uid that asked for it possess its
// session keyring; another uid presenting it (replaying one it saw) gains
// nothing, and guessed tokens are refused.
func TestSessionTokensAgainstOtherUIDs(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{})
	alice := startAgent(t, d, asOwner)
	rs := alice.do(
		call{Op: "join", NilS: true},
		call{Op: "add", A: int64(keys.SessionKeyring), S: "user", T: "shared", P: []byte("s")},
		call{Op: "token"},
	)
	session, key, tok := keys.Serial(rs[0].N), keys.Serial(rs[1].N), string(rs[2].Out)
	if rs[0].Errno != 0 || rs[1].Errno != 0 || rs[2].Errno != 0 {
		t.Fatalf("alice: %+v", rs)
	}
	// Let everyone search the key and the session, so that only
	// possession is in question.
	for _, id := range []keys.Serial{session, key} {
		if r := alice.one(call{Op: "setperm", A: int64(id), B: int64(keys.PossAll | keys.UserAll | keys.OtherAll&^keys.SetAttr)}); r.Errno != 0 {
			t.Fatalf("setperm: %s", r.Err)
		}
	}
	serial, secret, ok := strings.Cut(tok, ":")
	if !ok || serial != fmt.Sprint(session) || len(secret) != 32 {
		t.Fatalf("token %q: want \"%d:\" and 128 random bits in hex", tok, session)
	}

	// Another process of the same uid: possesses the session.
	alice2 := startAgent(t, d, asOwner, client.SessionEnv+"="+tok)
	if r := alice2.one(call{Op: "search", A: int64(keys.SessionKeyring), S: "user", T: "shared"}); r.Errno != 0 || keys.Serial(r.N) != key {
		t.Fatalf("same uid with the token: %+v", r)
	}
	// Another uid replaying it: refused outright, and its session is
	// its own.
	mallory := startAgent(t, d, asOther, client.SessionEnv+"="+tok)
	rs = mallory.do(
		call{Op: "getid", A: int64(keys.SessionKeyring)},
		call{Op: "search", A: int64(keys.SessionKeyring), S: "user", T: "shared"},
		call{Op: "rawdial"},
		call{Op: "raw", A: int64(wire.OpSessionAttach), Bufs: [][]byte{[]byte(secret)}},
		call{Op: "raw", A: int64(wire.OpGetKeyringID), Ints: []int64{int64(keys.SessionKeyring), 0}},
	)
	if keys.Serial(rs[0].N) == session {
		t.Fatalf("uid %d replaying uid %d's token got its session keyring", asOther.uid, asOwner.uid)
	}
	if rs[1].Errno == 0 {
		t.Fatalf("uid %d replaying the token found the session's key", asOther.uid)
	}
	if rs[3].Errno != int(keys.EACCES) {
		t.Fatalf("replayed token: errno %d, want EACCES", rs[3].Errno)
	}
	if len(rs[4].Ints) > 0 && keys.Serial(rs[4].Ints[0]) == session {
		t.Fatal("the replaying connection holds the session")
	}
	// Without possession, the key's own "other" rights still apply: the
	// replay adds nothing to them. Reading by serial works only because
	// the mask grants other read.
	if r := mallory.one(call{Op: "read", A: int64(key)}); r.Errno != 0 {
		t.Fatalf("other read with the other-read right: %+v", r)
	}

	// Guesses: random tokens, and the real one with one digit changed.
	const guesses = 2000
	calls := []call{{Op: "rawdial"}}
	for i := 0; i < guesses; i++ {
		var b [16]byte
		rand.Read(b[:])
		calls = append(calls, call{Op: "raw", A: int64(wire.OpSessionAttach), Bufs: [][]byte{[]byte(hex.EncodeToString(b[:]))}})
	}
	near := []byte(secret)
	near[0] ^= 1
	for _, g := range [][]byte{near, []byte(secret[:31]), []byte(secret + "0"), []byte(strings.ToUpper(secret)), {}, nil} {
		calls = append(calls, call{Op: "raw", A: int64(wire.OpSessionAttach), Bufs: [][]byte{g}})
	}
	for i, r := range mallory.do(calls...)[1:] {
		if r.Errno != int(keys.EACCES) {
			t.Fatalf("guess %d: errno %d, want EACCES", i, r.Errno)
		}
	}
	// Guessing with alice's own uid fails the same way.
	for i, r := range alice2.do(calls...)[1:] {
		if r.Errno != int(keys.EACCES) {
			t.Fatalf("same-uid guess %d: errno %d, want EACCES", i, r.Errno)
		}
	}
	t.Logf("%d guessed and %d replayed tokens refused", 2*(guesses+6), 2)
}

// The daemon's socket and directory modes: a root daemon's directory is
// 0755 and its socket 0666 (every user may connect; the daemon checks each
// caller); a user's daemon keeps its directory 0700. A directory that
// someone else owns or can write is refused: whoever controls it could
// put their own socket in the daemon's place.
func TestSocketModes(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{})
	sock, err := os.Stat(d.path)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.Stat(filepath.Dir(d.path))
	if err != nil {
		t.Fatal(err)
	}
	if sock.Mode().Perm() != 0o666 || sock.Mode()&os.ModeSocket == 0 || dir.Mode().Perm() != 0o755 {
		t.Fatalf("root daemon: socket %v, directory %v; want socket 0666, directory 0755", sock.Mode(), dir.Mode())
	}

	base, err := os.MkdirTemp("", "ukeys-modes-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	userDir := filepath.Join(base, "alice")
	if err := os.Mkdir(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userDir, int(asOwner.uid), int(asOwner.gid)); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, d, asOwner)
	if r := a.one(call{Op: "listen", S: filepath.Join(userDir, "ukeys", "ukeyd.sock")}); r.Errno != 0 || string(r.Out) != "666 700" {
		t.Fatalf("user daemon: %+v; want socket 666, directory 700", r)
	}

	// Directories another uid prepared.
	hostile := filepath.Join(base, "hostile")
	if err := os.Mkdir(hostile, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(hostile, 0o777)
	os.Chown(hostile, int(asOther.uid), int(asOther.gid))
	if r := a.one(call{Op: "listen", S: filepath.Join(hostile, "ukeyd.sock")}); r.Errno == 0 {
		t.Fatal("a user's daemon listened in a directory another uid owns and everyone may write")
	}
	if ln, err := server.Listen(filepath.Join(hostile, "ukeyd.sock")); err == nil {
		ln.Close()
		t.Fatal("root's daemon listened in a directory another uid owns")
	}
	os.Chown(hostile, 0, 0)
	if ln, err := server.Listen(filepath.Join(hostile, "ukeyd.sock")); err == nil {
		ln.Close()
		t.Fatal("root's daemon listened in a directory everyone may write")
	}
	os.Chmod(hostile, 0o755)
	ln, err := server.Listen(filepath.Join(hostile, "ukeyd.sock"))
	if err != nil {
		t.Fatalf("a safe directory refused: %v", err)
	}
	ln.Close()
}

// A client cannot lie its way in: nothing in a request names who sends
// it, so a uid that forges whatever the protocol lets it forge (tags,
// serials, tokens, operations meant for others) gets the kernel's refusals
// and changes nothing of another user's.
func TestLyingClientGainsNothing(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{})
	root := d.dial(t)
	named := "root-named"
	rootSess, err := root.JoinSessionKeyring(&named)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := root.AddKey("user", "root-secret", []byte("root-only"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	descBefore, _ := root.Describe(secret)
	procBefore, _ := root.ProcKeys()

	// Mallory logs in elsewhere: a session of its own, as pam_keyinit
	// gives a login. (A child of root's process would inherit root's
	// session and possess its keys, in the kernel as here.)
	m := startAgent(t, d, asNobody)
	if r := m.one(call{Op: "join", NilS: true}); r.Errno != 0 {
		t.Fatalf("mallory's login session: %+v", r)
	}
	own := m.one(call{Op: "add", A: int64(keys.UserKeyring), S: "user", T: "mine", P: []byte("m")})
	if own.Errno != 0 {
		t.Fatal(own.Err)
	}
	raw := func(op wire.Op, ints []int64, bufs ...[]byte) call {
		return call{Op: "raw", A: int64(op), Ints: ints, Bufs: bufs}
	}
	attempts := []struct {
		what string
		c    call
		want keys.Errno
	}{
		{"read root's key", raw(wire.OpRead, []int64{int64(secret)}), keys.EACCES},
		{"describe root's key", raw(wire.OpDescribe, []int64{int64(secret)}), keys.EACCES},
		{"update root's key", raw(wire.OpUpdate, []int64{int64(secret)}, []byte("x")), keys.EACCES},
		{"revoke root's key", raw(wire.OpRevoke, []int64{int64(secret)}), keys.EACCES},
		{"setperm root's key", raw(wire.OpSetPerm, []int64{int64(secret), int64(keys.PermMask)}), keys.EACCES},
		{"chown root's key to self", raw(wire.OpChown, []int64{int64(secret), 65534, -1}), keys.EACCES},
		{"chown own key to root", raw(wire.OpChown, []int64{own.N, 0, -1}), keys.EACCES},
		{"chgrp own key to root's group", raw(wire.OpChown, []int64{own.N, -1, 0}), keys.EACCES},
		{"link root's key", raw(wire.OpLink, []int64{int64(secret), int64(keys.SessionKeyring)}), keys.EACCES},
		{"unlink root's key from root's session", raw(wire.OpUnlink, []int64{int64(secret), int64(rootSess)}), keys.EACCES},
		{"clear root's session", raw(wire.OpClear, []int64{int64(rootSess)}), keys.EACCES},

		{"instantiate root's key", raw(wire.OpInstantiate, []int64{int64(secret), 0}, []byte("x")), keys.EPERM},
		// No authorisation to construct the key is found: ENOKEY, as the
		// kernel's key_get_instantiation_authkey.
		{"assume authority over root's key", raw(wire.OpAssumeAuthority, []int64{int64(secret)}), keys.ENOKEY},
		{"root's persistent keyring", raw(wire.OpGetPersistent, []int64{0, int64(keys.SessionKeyring)}), keys.EPERM},
		{"set a tunable", raw(wire.OpSysctlSet, nil, []byte("maxkeys"), []byte("1000000")), keys.EACCES},
		{"a forged helper token", raw(wire.OpSessionAttach, nil, []byte("00000000000000000000000000000000")), keys.EACCES},
		{"give its session to a parent that is not a client", raw(wire.OpSessionToParent, nil), keys.EPERM},
		{"an unknown operation", raw(wire.Op(4242), []int64{int64(secret)}), keys.EOPNOTSUPP},
		{"a special id that is not one", raw(wire.OpDescribe, []int64{-99}), keys.EINVAL},
	}
	calls := []call{{Op: "rawdial"}}
	for _, a := range attempts {
		calls = append(calls, a.c)
	}
	rs := m.do(calls...)[1:]
	for i, a := range attempts {
		if rs[i].Errno != int(a.want) {
			t.Errorf("%s: errno %d (%s), want %v", a.what, rs[i].Errno, rs[i].Err, a.want)
		}
	}
	// Joining root's named session by name, without search permission
	// on it, makes a keyring of the same name of its own (the kernel's
	// find_keyring_by_name skips what the caller may not search).
	if r := m.one(call{Op: "join", S: named}); r.Errno != 0 || keys.Serial(r.N) == rootSess {
		t.Errorf("joining root's named session: %+v (root's is %d)", r, rootSess)
	}
	// Its view of /proc/keys shows nothing of root's.
	if r := m.one(call{Op: "proc"}); strings.Contains(string(r.Out), "root-secret") || strings.Contains(string(r.Out), fmt.Sprintf("%08x", uint32(rootSess))) {
		t.Errorf("uid 65534's /proc/keys shows root's keys:\n%s", r.Out)
	}
	// Root's key is as it was.
	if b, err := root.Read(secret); err != nil || string(b) != "root-only" {
		t.Fatalf("root's key after the attempts: %q, %v", b, err)
	}
	descAfter, _ := root.Describe(secret)
	procAfter, _ := root.ProcKeys()
	// The register of user keyrings gained the other uid's.
	procBefore, procAfter = withoutLine(procBefore, ".user_reg"), withoutLine(procAfter, ".user_reg")
	if descAfter != descBefore || procAfter != procBefore {
		t.Fatalf("root's keys changed:\n%s\n%s\nvs\n%s\n%s", descBefore, procBefore, descAfter, procAfter)
	}
	if tun := d.svc.Tunables(); tun.MaxKeys != keys.DefaultTunables().MaxKeys {
		t.Fatal("a tunable changed")
	}
}

// A uid that floods adds runs into its quota (EDQUOT) for keys and for
// bytes; other users keep working; oversized arguments are refused with
// EINVAL, oversized frames close only that connection.
func TestQuotaFloodAndOversizedArguments(t *testing.T) {
	needRoot(t)
	tun := keys.DefaultTunables()
	tun.MaxKeys, tun.MaxBytes = 25, 4000
	d := startDaemon(t, daemonConfig{tunables: &tun})
	flooder := startAgent(t, d, asGroup)
	victim := startAgent(t, d, asOther)
	if r := victim.one(call{Op: "join", NilS: true}); r.Errno != 0 {
		t.Fatal(r.Err)
	}
	rs := flooder.do(
		call{Op: "join", NilS: true},
		call{Op: "flood", A: int64(keys.SessionKeyring), P: []byte("x")},
		call{Op: "flood", A: int64(keys.SessionKeyring), P: make([]byte, 1000)},
	)
	if rs[1].Errno != int(keys.EDQUOT) || rs[1].N == 0 {
		t.Fatalf("key flood: %d keys then %+v, want EDQUOT", rs[1].N, rs[1])
	}
	if rs[2].Errno != int(keys.EDQUOT) {
		t.Fatalf("byte flood: %+v, want EDQUOT", rs[2])
	}
	if k, b := d.svc.QuotaUsage(asGroup.uid); k > tun.MaxKeys || b > tun.MaxBytes {
		t.Fatalf("flooder holds %d keys, %d bytes past its quota", k, b)
	}
	// Others are unaffected.
	rs = victim.do(call{Op: "add", A: int64(keys.SessionKeyring), S: "user", T: "v", P: []byte("victim")})
	if rs[0].Errno != 0 {
		t.Fatalf("another uid after the flood: %s", rs[0].Err)
	}
	if r := victim.one(call{Op: "read", A: rs[0].N}); r.Errno != 0 || string(r.Out) != "victim" {
		t.Fatalf("another uid reading after the flood: %+v", r)
	}
	root := d.dial(t)
	if _, err := root.AddKey("user", "root-ok", []byte("r"), keys.UserKeyring); err != nil {
		t.Fatalf("root after the flood: %v", err)
	}

	// Oversized arguments.
	big := func(n int) []byte { return make([]byte, n) }
	rs = victim.do(
		call{Op: "add", A: int64(keys.SessionKeyring), S: "user", T: strings.Repeat("d", keys.MaxDescription+1), P: []byte("x")},
		call{Op: "add", A: int64(keys.SessionKeyring), S: "user", T: "big", P: big(keys.MaxUserPayload + 1)},
		call{Op: "add", A: int64(keys.SessionKeyring), S: "big_key", T: "big", P: big(keys.MaxPayload + 1)},
		call{Op: "update", A: 0, P: big(keys.MaxUpdatePayload + 1)},
		call{Op: "request", A: 0, S: "user", T: strings.Repeat("d", keys.MaxDescription+1)},
		// Non-NUL bytes: a callout, like any string, ends at its first NUL.
		call{Op: "request", A: 0, S: "user", T: "d", P: []byte(strings.Repeat("c", keys.MaxCalloutInfo+1))},
		call{Op: "join", S: strings.Repeat("n", keys.MaxDescription+1)},
		call{Op: "add", A: int64(keys.SessionKeyring), S: strings.Repeat("t", 64), T: "d", P: []byte("x")},
	)
	for i, r := range rs {
		if r.Errno != int(keys.EINVAL) {
			t.Errorf("oversized argument %d: %+v, want EINVAL", i, r)
		}
	}
	// A frame larger than the protocol allows: the client refuses to send
	// it; sent raw, the daemon drops that connection before reading it.
	if _, err := root.AddKey("user", "huge", big(wire.MaxFrame+1), keys.UserKeyring); err == nil {
		t.Fatal("the client sent a frame past MaxFrame")
	}
	conn, err := net.Dial("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
	wire.ReadFrame(conn, nil)
	conn.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	if _, err := wire.ReadFrame(conn, nil); err == nil {
		t.Fatal("the daemon answered a 2 GiB frame header")
	}
	conn.Close()
	if _, err := root.AddKey("user", "still", []byte("r"), keys.UserKeyring); err != nil {
		t.Fatalf("root after the oversized frame: %v", err)
	}
	flooder.stop()
	// The daemon releases an exited process's keyrings on its own
	// schedule (at its last close, or at its next look at the process):
	// wait for that, then for their destruction. What may stay: the uid's
	// user and user-session keyrings.
	testutil.Eventually(t, "the flooder's keys to go with its process", func() bool {
		if err := d.svc.WaitGC(context.Background()); err != nil {
			t.Fatal(err)
		}
		k, _ := d.svc.QuotaUsage(asGroup.uid)
		return k <= 2
	})
	d.settle(t)
}

func withoutLine(text, containing string) string {
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, containing) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
