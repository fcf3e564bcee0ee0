package keys

import (
	"bufio"
	"bytes"
	"context"
	"crypto/elliptic"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/internal/secmem"
)

// dumpState describes every key of s as Import must make it again: its
// record, what reading it gives its owner, its links in listing order
// with their slots, its restriction, and its references (links and
// callers); then every owner's quota record.
func dumpState(t *testing.T, s *Service) string {
	t.Helper()
	var lines []string
	for k := range s.index.all() {
		ty := k.typ.Load()
		l := fmt.Sprintf("%d %s %q uid=%d gid=%d perm=%08x flags=%#x state=%v expiry=%d usage=%d quotalen=%d",
			k.serial, ty.Name, k.description(), k.uid.Load(), k.gid.Load(), k.perm.Load(), k.flags.Load()&exportedFlags,
			k.state.Load(), k.expiry.Load(), k.usage.Load(), k.quotalen)
		if p := k.loadPayload(); p != nil && k.state.Load() == statePositive {
			var b bytes.Buffer
			if err := ty.export(p, func(x []byte) { b.Write(x) }); err != nil {
				t.Fatal(err)
			}
			if ty == encryptedType {
				// The same secret under the same IV and master: the blob
				// a reader gets is the same.
				l += fmt.Sprintf(" payload=%x", b.Bytes())
			} else if b.Len() > 64 {
				l += fmt.Sprintf(" payload=sha256:%x len=%d charge=%d", sha256.Sum256(b.Bytes()), p.Len(), payloadCharge(k))
			} else {
				l += fmt.Sprintf(" payload=%q len=%d charge=%d", b.String(), p.Len(), payloadCharge(k))
			}
		}
		if snap := k.loadRing(); snap != nil {
			for _, ln := range snap.links() {
				l += fmt.Sprintf(" [%d@%d]", ln.key.serial, ln.slot)
			}
			l += fmt.Sprintf(" next=%d used=%#x", snap.next, snap.used)
		}
		if r := k.restriction(); r != nil {
			l += fmt.Sprintf(" restrict=%q", r.spec)
		}
		lines = append(lines, l)
	}
	slices.Sort(lines)
	s.usersMu.RLock()
	for uid, u := range s.users {
		u.mu.Lock()
		lines = append(lines, fmt.Sprintf("user %d: keys=%d instantiated=%d quota=%d/%d", uid, u.nkeys, u.nikeys, u.qnkeys, u.qnbyte))
		u.mu.Unlock()
	}
	s.usersMu.RUnlock()
	slices.Sort(lines[len(lines)-len(s.users):])
	return strings.Join(lines, "\n")
}

// handOver exports e's service, imports it into a new service on the
// same clock, gives the callers their keyrings back, and returns the new
// service and callers.
func handOver(t *testing.T, e *env, callers ...*Caller) (*Service, []*Caller) {
	t.Helper()
	var buf bytes.Buffer
	if err := e.s.Export(&buf); err != nil {
		t.Fatal(err)
	}
	rs, err := Import(&buf, WithClock(e.clock.now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Service().Close() })
	var out []*Caller
	for _, c := range callers {
		nc, err := rs.Caller(c.State())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Release)
		out = append(out, nc)
	}
	rs.Done()
	return rs.Service(), out
}

// Every kind of key and keyring the service holds comes back from a
// hand-over as it was: records, payloads (big keys in files, encrypted
// keys, certificates and private keys), links slot for slot, restrictions,
// quota, references, the callers' keyrings, and what the timers will do.
func TestStateRoundTrip(t *testing.T) {
	e := newEnv(t)
	root := e.caller(0, 0)
	alice := e.caller(1000, 1000)
	bob := e.caller(1001, 1001, 50)

	// Payloads of every type.
	must(alice.AddKey("user", "greeting", []byte("hello"), SessionKeyring))(t)
	must(alice.AddKey("logon", "svc:pw", []byte("s3cret"), UserKeyring))(t)
	must(alice.AddKey("big_key", "small", []byte("inline"), SessionKeyring))(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	must(alice.AddKey("big_key", "large", big, SessionKeyring))(t)
	must(alice.AddKey("user", "kmk", []byte("master key bytes"), SessionKeyring))(t)
	enc := must(alice.AddKey("encrypted", "evm", []byte("new user:kmk 32"), SessionKeyring))(t)
	blob := must(alice.Read(enc))(t)
	ca := certtest.New(t, certtest.Options{CN: "CA", CA: true}, nil)
	leaf := certtest.New(t, certtest.Options{CN: "leaf", Serial: 2, Curve: elliptic.P256()}, ca)
	caID := must(root.AddKey("asymmetric", "", ca.DER, SessionKeyring))(t)
	must(root.AddKey("asymmetric", "signer", leaf.PKCS8, SessionKeyring))(t)

	// Keyrings: nested, named twice (the older is the one a join finds),
	// restricted both ways, with a link removed (a free slot) and more
	// than 16 links (slots past the first node).
	ring := must(bob.AddKey("keyring", "shared", nil, SessionKeyring))(t)
	ring2 := must(bob.AddKey("keyring", "shared", nil, ProcessKeyring))(t)
	for _, id := range []Serial{ring, ring2} {
		// Searchable by their owner: a join by name may find them.
		if err := bob.SetPerm(id, PossAll|UserAll); err != nil {
			t.Fatal(err)
		}
	}
	inner := must(bob.AddKey("keyring", "inner", nil, ring))(t)
	var gone Serial
	for i := range 20 {
		id := must(bob.AddKey("user", fmt.Sprintf("k%d", i), []byte{byte(i)}, inner))(t)
		if i == 3 {
			gone = id
		}
	}
	if err := bob.Unlink(gone, inner); err != nil {
		t.Fatal(err)
	}
	must(bob.AddKey("user", "late", []byte("l"), inner))(t)
	if err := bob.Link(inner, SessionKeyring); err != nil {
		t.Fatal(err)
	}
	locked := must(root.AddKey("keyring", "locked", nil, SessionKeyring))(t)
	if err := root.RestrictKeyring(locked, nil, nil); err != nil {
		t.Fatal(err)
	}
	trusting := must(root.AddKey("keyring", "trusting", nil, SessionKeyring))(t)
	asym, spec := "asymmetric", fmt.Sprintf("key_or_keyring:%d", caID)
	if err := root.RestrictKeyring(trusting, &asym, &spec); err != nil {
		t.Fatal(err)
	}

	// Timers: a key that expires, one revoked, a negative one, one
	// invalidated; a persistent keyring.
	exp := must(alice.AddKey("user", "soon", []byte("x"), SessionKeyring))(t)
	if err := alice.SetTimeout(exp, 60); err != nil {
		t.Fatal(err)
	}
	rev := must(alice.AddKey("user", "revoked", []byte("x"), SessionKeyring))(t)
	if err := alice.Revoke(rev); err != nil {
		t.Fatal(err)
	}
	must(bob.GetPersistent(-1, SessionKeyring))(t)
	_ = must(alice.AddKey("user", "pid-kept", []byte("p"), ProcessKeyring))(t)
	_ = must(alice.AddKey("user", "tid-kept", []byte("t"), ThreadKeyring))(t)
	if _, err := alice.SetReqKeyKeyring(ReqKeySession); err != nil {
		t.Fatal(err)
	}
	e.settle()

	before := dumpState(t, e.s)
	if err := e.s.Check(); err != nil {
		t.Fatal(err)
	}
	s2, cs := handOver(t, e, root, alice, bob)
	after := dumpState(t, s2)
	if before != after {
		t.Fatalf("the state after the hand-over differs\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := s2.Check(); err != nil {
		t.Fatal(err)
	}
	root2, alice2, bob2 := cs[0], cs[1], cs[2]

	// What callers see is the same.
	for i, c := range []*Caller{root, alice, bob} {
		if a, b := c.ProcKeys(), cs[i].ProcKeys(); a != b {
			t.Errorf("caller %d's /proc/keys:\n%s\nafter:\n%s", i, a, b)
		}
	}
	if got := must(alice2.Read(enc))(t); !bytes.Equal(got, blob) {
		t.Errorf("the encrypted key reads %q after, %q before", got, blob)
	}
	if got := must(alice2.Read(must(alice2.Search(SessionKeyring, "big_key", "large", 0))(t)))(t); !bytes.Equal(got, big) {
		t.Error("the large big_key reads differently")
	}
	// The older "shared" keyring is still the one a join by name finds.
	name := "shared"
	if got := must(bob2.JoinSessionKeyring(&name))(t); got != ring {
		t.Errorf("joining %q finds %d, want the older %d", name, got, ring)
	}
	// Restrictions act: the locked keyring takes nothing, the trusting
	// one only what the CA signed.
	if _, err := root2.AddKey("user", "x", []byte("x"), locked); !errors.Is(err, EPERM) {
		t.Errorf("adding to the locked keyring after: %v", err)
	}
	if _, err := root2.AddKey("asymmetric", "", leaf.DER, trusting); err != nil {
		t.Errorf("adding a certificate the CA signed to the trusting keyring: %v", err)
	}
	other := certtest.New(t, certtest.Options{CN: "Other", CA: true}, nil)
	if _, err := root2.AddKey("asymmetric", "", other.DER, trusting); err == nil {
		t.Error("the trusting keyring took a certificate its CA did not sign")
	}
	// The timers run as they would have: the expiring key expires, and
	// the revoked and expired keys go once gc_delay has passed.
	e.clock.advance(61 * time.Second)
	if _, err := alice2.Read(exp); !errors.Is(err, EKEYEXPIRED) {
		t.Errorf("the expiring key 61 s later: %v", err)
	}
	e.clock.advance(301 * time.Second)
	s2.RequestGC() // the fake clock does not fire the collector's timer
	s2.WaitGC(t.Context())
	for _, id := range []Serial{exp, rev} {
		if s2.lookup(id) != nil {
			t.Errorf("key %d still there after gc_delay", id)
		}
	}
	_ = bob2
}

// smallState is a service with a few keys of the kinds a stream carries,
// and its export.
func smallState(t *testing.T) (*env, *Caller, []byte) {
	t.Helper()
	e := newEnv(t)
	c := e.caller(1000, 1000)
	ring := must(c.AddKey("keyring", "ring", nil, SessionKeyring))(t)
	must(c.AddKey("user", "a", []byte("alpha"), ring))(t)
	must(c.AddKey("logon", "b:c", []byte("beta"), SessionKeyring))(t)
	neg := must(c.AddKey("user", "n", []byte("x"), SessionKeyring))(t)
	if err := c.SetTimeout(neg, 10); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := e.s.Export(&buf); err != nil {
		t.Fatal(err)
	}
	return e, c, buf.Bytes()
}

// seedStream is a small stream for the fuzz target's corpus.
func seedStream(f *testing.F) []byte {
	s := New()
	defer s.Close()
	c := s.NewCaller(Cred{UID: 1000, GID: 1000})
	defer c.Release()
	ring, err := c.AddKey("keyring", "ring", nil, SessionKeyring)
	if err == nil {
		_, err = c.AddKey("user", "a", []byte("alpha"), ring)
	}
	if err == nil {
		_, err = c.AddKey("big_key", "b", []byte("beta"), SessionKeyring)
	}
	var buf bytes.Buffer
	if err == nil {
		err = s.Export(&buf)
	}
	if err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// A stream of a later version is refused as such, so that the daemon
// that wrote it keeps serving; every truncation and a stream that is no
// stream are refused as corrupt; nothing is left of a refused import.
func TestStateRefused(t *testing.T) {
	_, _, b := smallState(t)
	later := slices.Clone(b)
	later[len(stateMagic)] = StateVersion + 1
	if _, err := Import(bytes.NewReader(later)); !errors.Is(err, ErrStateVersion) {
		t.Errorf("a stream of version %d: %v", StateVersion+1, err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := Import(bytes.NewReader(b[:n])); !errors.Is(err, ErrStateCorrupt) {
			t.Fatalf("the stream cut at %d of %d bytes: %v", n, len(b), err)
		}
	}
	if _, err := Import(strings.NewReader("GET / HTTP/1.1\r\n\r\n")); !errors.Is(err, ErrStateCorrupt) {
		t.Errorf("not a stream: %v", err)
	}
}

// Keyrings that link each other in a loop, which the kernel never lets
// be made, are refused: every search would walk them forever.
func TestStateRefusesLoops(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	a := must(c.AddKey("keyring", "a", nil, SessionKeyring))(t)
	b := must(c.AddKey("keyring", "b", nil, a))(t)
	var buf bytes.Buffer
	if err := e.s.Export(&buf); err != nil {
		t.Fatal(err)
	}
	// Forge b → a beside a → b.
	forged := forgeLink(t, buf.Bytes(), b, a)
	if _, err := Import(bytes.NewReader(forged)); !errors.Is(err, ErrStateCorrupt) || !strings.Contains(err.Error(), "loop") {
		t.Fatalf("a stream with a loop of keyrings: %v", err)
	}
}

// forgeLink rewrites stream b so that keyring ring also links k: it
// decodes the stream with the reader's own primitives up to the links
// section and appends one more keyring's links.
func forgeLink(t *testing.T, b []byte, ring, k Serial) []byte {
	t.Helper()
	rs, err := Import(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Service().Close()
	rs.Done()
	// Re-export with the link made behind the service's back.
	s := rs.Service()
	r, kk := s.lookup(ring), s.lookup(k)
	snap, _, _ := r.loadRing().with(&s.index, kk)
	r.storeRing(snap)
	kk.get()
	kk.addParent(r)
	var out bytes.Buffer
	if err := s.Export(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Whatever bytes arrive, Import never panics or hangs, and a stream it
// accepts makes a service whose invariants hold.
func FuzzImport(f *testing.F) {
	f.Add(seedStream(f))
	f.Add([]byte(stateMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := Import(bytes.NewReader(b))
		if err != nil {
			return
		}
		s := rs.Service()
		defer s.Close()
		rs.Done()
		if err := s.WaitGC(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatalf("an accepted stream made a broken service: %v", err)
		}
	})
}

var updateState = flag.Bool("update-state", false, "rewrite testdata/state-v*.stream and .txt with a new stream of this version")

// A daemon takes over from the one before it: the stream of every
// version this package ever wrote (testdata/state-vN.stream, written
// once by that version and kept) still imports, into what the version
// recorded beside it (state-vN.txt).
func TestStateEarlierVersions(t *testing.T) {
	if *updateState {
		e := newEnv(t)
		c := e.caller(1000, 1000)
		ring := must(c.AddKey("keyring", "ring", nil, SessionKeyring))(t)
		must(c.AddKey("user", "a", []byte("alpha"), ring))(t)
		must(c.AddKey("logon", "b:c", []byte("beta"), ring))(t)
		must(c.AddKey("big_key", "big", bytes.Repeat([]byte("b"), 20000), ring))(t)
		must(c.AddKey("user", "kmk", []byte("master"), ring))(t)
		must(c.AddKey("encrypted", "enc", []byte("new user:kmk 32"), ring))(t)
		ca := certtest.New(t, certtest.Options{CN: "CA", CA: true}, nil)
		must(c.AddKey("asymmetric", "", ca.DER, ring))(t)
		exp := must(c.AddKey("user", "expiring", []byte("x"), ring))(t)
		if err := c.SetTimeout(exp, 100); err != nil {
			t.Fatal(err)
		}
		rev := must(c.AddKey("user", "revoked", []byte("x"), ring))(t)
		if err := c.Revoke(rev); err != nil {
			t.Fatal(err)
		}
		locked := must(c.AddKey("keyring", "locked", nil, ring))(t)
		if err := c.RestrictKeyring(locked, nil, nil); err != nil {
			t.Fatal(err)
		}
		e.settle()
		var buf bytes.Buffer
		if err := e.s.Export(&buf); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("testdata/state-v%d", StateVersion)
		if err := os.WriteFile(name+".stream", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		rs, err := Import(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		// Before Done: the stream has no callers, and what only they held
		// would go to the collector.
		if err := os.WriteFile(name+".txt", []byte(dumpState(t, rs.Service())+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rs.Done()
		rs.Service().Close()
	}
	files, _ := filepath.Glob("testdata/state-v*.stream")
	if len(files) < StateVersion {
		t.Fatalf("%d streams of earlier versions in testdata, want one for each of the %d versions", len(files), StateVersion)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(strings.TrimSuffix(f, ".stream") + ".txt")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Import(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got := dumpState(t, rs.Service()) + "\n"; got != string(want) {
			t.Errorf("%s imports as\n%s\nwant\n%s", f, got, want)
		}
		rs.Done()
		if err := rs.Service().WaitGC(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := rs.Service().Check(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		rs.Service().Close()
	}
}

// TestExportBusyLeavesNoPayloadBuffered: Export refused with EBUSY (a key
// under construction) has by then written every key's payload into its
// buffer; the buffer must not keep them.
func TestExportBusyLeavesNoPayloadBuffered(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
		close(started)
		<-release
		if _, err := u.Helper.AssumeAuthority(u.Key); err != nil {
			return err
		}
		return u.Helper.Negate(u.Key, 1, 0)
	})))
	c := e.caller(1000, 1000)
	secret := []byte("payload that must not linger")
	must(c.AddKey("user", "secret", secret, SessionKeyring))(t)
	done := make(chan error)
	go func() {
		_, err := c.RequestKey("user", "pending", []byte("info"), 0)
		done <- err
	}()
	<-started
	var out bytes.Buffer
	bw := bufio.NewWriterSize(&out, 1<<20) // larger than the stream: Export alone decides what leaves it
	err := e.s.Export(bw)
	close(release)
	if !errors.Is(err, EBUSY) {
		t.Fatalf("Export with a key under construction: %v, want EBUSY", err)
	}
	if err := <-done; !errors.Is(err, ENOKEY) {
		t.Errorf("the pending request_key: %v, want ENOKEY", err)
	}
	if n := bw.Buffered(); n != 0 {
		t.Errorf("%d bytes of the abandoned stream left in the buffer", n)
	}
	b := bw.AvailableBuffer()
	if i := bytes.IndexFunc(b[:cap(b)], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("the buffer still holds data at %d", i)
	}
}

// Import makes keys in one goroutine and admits them in another, batch
// by batch: over many batches, keys of every kind (instantiated,
// negative, revoked, in quota or not, keyrings nested among them, owners
// taking turns) come back as they were, each owner charged as before,
// as when the keys were few (TestStateRoundTrip).
func TestStateRoundTripManyBatches(t *testing.T) {
	e := newEnv(t, WithUpcall(UpcallFunc(func(_ context.Context, u *Upcall) error {
		if _, err := u.Helper.AssumeAuthority(u.Key); err != nil {
			return err
		}
		return u.Helper.Negate(u.Key, 30, 0)
	})))
	// Root and two users, whose quota (200 keys) runs out on the way.
	owners := []*Caller{e.caller(0, 0), e.caller(1000, 1000), e.caller(0, 0), e.caller(1001, 1001)}
	n := admitBatch*admitBatches*2 + admitBatch/3
	rings := make([][]Serial, len(owners))
	for i := range n {
		o := i % len(owners)
		c := owners[o]
		if i%97 == 0 {
			if r, err := c.AddKey("keyring", fmt.Sprintf("r%d", i), nil, SessionKeyring); err == nil {
				rings[o] = append(rings[o], r)
			} else if !errors.Is(err, EDQUOT) {
				t.Fatal(err)
			}
			continue
		}
		dest := SessionKeyring
		if rs := rings[o]; len(rs) > 0 && i%3 != 0 {
			dest = rs[(i/7)%len(rs)]
		}
		if i%11 == 2 {
			// Negative: the helper negates it.
			if _, err := c.RequestKey("user", fmt.Sprintf("k%d", i), []byte("info"), dest); !errors.Is(err, ENOKEY) && !errors.Is(err, EDQUOT) {
				t.Fatalf("requesting key %d: %v, want ENOKEY", i, err)
			}
			continue
		}
		id, err := c.AddKey("user", fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("payload %d", i)), dest)
		if errors.Is(err, EDQUOT) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%11 == 1 {
			if err := c.Revoke(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.settle()
	before := dumpState(t, e.s)
	s2, _ := handOver(t, e, owners...)
	if after := dumpState(t, s2); before != after {
		t.Fatalf("the state after the hand-over differs\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := s2.Check(); err != nil {
		t.Fatal(err)
	}
}

// A stream that names one serial twice, the second time batches after
// the first, is refused, and every payload made for it is wiped and
// freed: those of the keys admitted, of the keys made and not yet
// admitted when the admitter failed, and of those made after.
func TestStateSerialTwiceLate(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	n := admitBatch * (admitBatches + 2)
	for i := range n {
		must(c.AddKey("user", fmt.Sprintf("k%d", i), []byte("sixteen bytes!!!"), SessionKeyring))(t)
	}
	e.settle()
	s := e.s
	x, err := s.exportOrder(func(*Key) {})
	if err != nil {
		t.Fatal(err)
	}
	defer x.release()
	// The keys as Export writes them, the first written again halfway.
	var buf bytes.Buffer
	w := newStateWriter(&buf)
	w.raw([]byte(stateMagic))
	w.uvarint(StateVersion)
	tun := s.Tunables()
	for _, v := range []int64{int64(tun.GCDelay), int64(tun.MaxKeys), int64(tun.MaxBytes), int64(tun.RootMaxKeys), int64(tun.RootMaxBytes), int64(tun.PersistentExpiry)} {
		w.varint(v)
	}
	w.uvarint(uint64(len(x.keys) + 1))
	sec := s.dom.Read()
	for i, k := range x.keys {
		s.exportKey(w, k)
		if i == len(x.keys)/2 {
			s.exportKey(w, x.keys[0])
		}
	}
	sec.End()
	w.uvarint(0)
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	inUse := secmem.Stats().InUse
	_, err = Import(&buf)
	if !errors.Is(err, ErrStateCorrupt) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a stream naming serial %d twice: %v", x.keys[0].serial, err)
	}
	// Other services' collectors may free payloads meanwhile, never make
	// them: more in use is a payload the refused import kept.
	if after := secmem.Stats().InUse; after > inUse {
		t.Errorf("%d bytes of the arena more in use after the refused import", after-inUse)
	}
}

// A stream that claims a payload of a GiB and ends is refused without
// the reader allocating (and wiping) the GiB it claimed: its buffer
// grows as the bytes arrive. (Found by FuzzImport, whose input took 12 s
// to clear the buffer.)
func TestStateClaimedLengthNotAllocated(t *testing.T) {
	e := newEnv(t)
	var buf bytes.Buffer
	w := newStateWriter(&buf)
	w.raw([]byte(stateMagic))
	w.uvarint(StateVersion)
	tun := e.s.Tunables()
	for _, v := range []int64{int64(tun.GCDelay), int64(tun.MaxKeys), int64(tun.MaxBytes), int64(tun.RootMaxKeys), int64(tun.RootMaxBytes), int64(tun.PersistentExpiry)} {
		w.varint(v)
	}
	w.uvarint(1)
	w.uvarint(1000) // serial
	w.str("user")
	w.str("k")
	for range 4 {
		w.uvarint(0) // uid, gid, perm, flags
	}
	w.varint(int64(statePositive))
	w.varint(0)        // expiry
	w.uvarint(1)       // a payload follows
	w.uvarint(1 << 30) // of a GiB
	w.raw([]byte("only this"))
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Import(&buf)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrStateCorrupt) {
		t.Fatalf("a stream that ends in a payload: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
		t.Errorf("the import allocated %d MiB for a payload of 9 bytes", got>>20)
	}
}
