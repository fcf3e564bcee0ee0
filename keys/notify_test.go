package keys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// drain returns every notification waiting in q.
func drain(q *WatchQueue) []Notification {
	var out []Notification
	for {
		n, ok := q.TryNext()
		if !ok {
			return out
		}
		out = append(out, n)
	}
}

// wantFail turns an expected failure into nil and anything else into an
// error, for steps that must fail without posting anything.
func wantFail(err error, want Errno) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("error %v, want %v", err, want)
	}
	return nil
}

func wantNotes(t *testing.T, what string, q *WatchQueue, want ...Notification) {
	t.Helper()
	if got := drain(q); !slices.Equal(got, want) {
		t.Fatalf("%s: notifications\n got %v\nwant %v", what, got, want)
	}
}

// TestNotifications watches a keyring (watch id 1) and keys in it
// (watch ids 2 and 3) and checks the records each operation posts.
func TestNotifications(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	root := e.caller(0, 0)
	q := NewWatchQueue(64)
	defer q.Close()
	ring := must(c.AddKey("keyring", "watched", nil, SessionKeyring))(t)
	other := must(c.AddKey("keyring", "other", nil, SessionKeyring))(t)
	if err := c.WatchKey(ring, q, 1); err != nil {
		t.Fatal(err)
	}
	var k, k2, k3 Serial
	steps := []struct {
		name string
		do   func() error
		want func() []Notification
	}{
		{"add", func() (err error) {
			k, err = c.AddKey("user", "a", []byte("x"), ring)
			return err
		}, func() []Notification {
			return []Notification{{Kind: NotifyLinked, Key: ring, Aux: int32(k), WatchID: 1}}
		}},
		{"watch the key", func() error { return c.WatchKey(k, q, 2) }, nil},
		{"update", func() error { return c.Update(k, []byte("y")) },
			func() []Notification { return []Notification{{Kind: NotifyUpdated, Key: k, WatchID: 2}} }},
		{"add_key onto the key", func() error { _, err := c.AddKey("user", "a", []byte("z"), ring); return err },
			func() []Notification { return []Notification{{Kind: NotifyUpdated, Key: k, WatchID: 2}} }},
		{"setperm", func() error { return c.SetPerm(k, PermDefault|SetAttr<<UserShift) },
			func() []Notification { return []Notification{{Kind: NotifySetAttr, Key: k, WatchID: 2}} }},
		{"chown", func() error { return c.Chown(k, -1, 1000) },
			func() []Notification { return []Notification{{Kind: NotifySetAttr, Key: k, WatchID: 2}} }},
		{"chown nothing", func() error { return c.Chown(k, -1, -1) }, nil},
		{"chown refused", func() error { return wantFail(c.Chown(k, 0, -1), EACCES) }, nil},
		{"root chown", func() error {
			if err := c.SetPerm(k, PermDefault|(SetAttr|View)<<OtherShift); err != nil {
				return err
			}
			return root.Chown(k, 1001, -1)
		}, func() []Notification {
			return []Notification{{Kind: NotifySetAttr, Key: k, WatchID: 2}, {Kind: NotifySetAttr, Key: k, WatchID: 2}}
		}},
		{"set timeout", func() error { return c.SetTimeout(k, 100) },
			func() []Notification { return []Notification{{Kind: NotifySetAttr, Key: k, WatchID: 2}} }},
		{"link elsewhere", func() error { return c.Link(k, other) }, nil},
		{"unlink", func() error { return c.Unlink(k, ring) },
			func() []Notification {
				return []Notification{{Kind: NotifyUnlinked, Key: ring, Aux: int32(k), WatchID: 1}}
			}},
		{"move in", func() error { return c.Move(k, other, ring, 0) },
			func() []Notification {
				return []Notification{{Kind: NotifyLinked, Key: ring, Aux: int32(k), WatchID: 1}}
			}},
		{"move out", func() error { return c.Move(k, ring, other, 0) },
			func() []Notification {
				return []Notification{{Kind: NotifyUnlinked, Key: ring, Aux: int32(k), WatchID: 1}}
			}},
		{"link back", func() error { return c.Link(k, ring) },
			func() []Notification {
				return []Notification{{Kind: NotifyLinked, Key: ring, Aux: int32(k), WatchID: 1}}
			}},
		{"revoke", func() error { return c.Revoke(k) },
			func() []Notification { return []Notification{{Kind: NotifyRevoked, Key: k, WatchID: 2}} }},
		{"revoke again", func() error { return wantFail(c.Revoke(k), EKEYREVOKED) }, nil},
		{"add another", func() (err error) {
			if k2, err = c.AddKey("user", "b", []byte("x"), ring); err != nil {
				return err
			}
			return c.WatchKey(k2, q, 3)
		}, func() []Notification {
			return []Notification{{Kind: NotifyLinked, Key: ring, Aux: int32(k2), WatchID: 1}}
		}},
		// The collector reaps an invalidated key at once: its link is
		// pruned (no unlink record, as in the kernel) and it is destroyed.
		{"invalidate", func() error { return c.Invalidate(k2) },
			func() []Notification {
				return []Notification{{Kind: NotifyInvalidated, Key: k2, WatchID: 3}, {Kind: NotifyRemoved, Key: k2, WatchID: 3}}
			}},
		{"invalidate again", func() error { return wantFail(c.Invalidate(k2), ENOKEY) }, nil},
		{"link another in its place", func() (err error) {
			if k3, err = c.AddKey("user", "b", []byte("y"), other); err != nil {
				return err
			}
			// k2's slot was freed by the collector: a plain new link.
			return c.Link(k3, ring)
		}, func() []Notification {
			return []Notification{
				{Kind: NotifyLinked, Key: ring, Aux: int32(k3), WatchID: 1},
			}
		}},
		{"restrict", func() error { return c.RestrictKeyring(ring, nil, nil) },
			func() []Notification { return []Notification{{Kind: NotifySetAttr, Key: ring, WatchID: 1}} }},
		{"clear", func() error { return c.Clear(ring) },
			func() []Notification { return []Notification{{Kind: NotifyCleared, Key: ring, WatchID: 1}} }},
		{"clear an empty keyring", func() error { return c.Clear(ring) },
			func() []Notification { return []Notification{{Kind: NotifyCleared, Key: ring, WatchID: 1}} }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		// The collector works in the background: let what a step set off
		// (an invalidated key pruned and destroyed) finish before looking.
		e.settle()
		var want []Notification
		if s.want != nil {
			want = s.want()
		}
		wantNotes(t, s.name, q, want...)
	}
	if q.Lost() != 0 {
		t.Fatalf("lost %d notifications", q.Lost())
	}
}

// TestNotifyConstruction watches a key while it is constructed. WatchKey,
// like the kernel's KEYCTL_WATCH_KEY, waits for a key under construction,
// so the watch on the key is installed directly.
func TestNotifyConstruction(t *testing.T) {
	cases := []struct {
		name   string
		answer func(u *Upcall, h *Caller) error
		aux    int32
	}{
		{"instantiate", func(u *Upcall, h *Caller) error { return h.Instantiate(u.Key, []byte("v"), 0) }, 0},
		{"negate", func(u *Upcall, h *Caller) error { return h.Negate(u.Key, 10, 0) }, -int32(ENOKEY)},
		{"reject", func(u *Upcall, h *Caller) error { return h.Reject(u.Key, 10, EKEYREJECTED, 0) }, -int32(EKEYREJECTED)},
		{"no answer", func(u *Upcall, h *Caller) error { return nil }, -int32(ENOKEY)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := NewWatchQueue(64)
			defer q.Close()
			var s *Service
			var key, auth Serial
			e := newEnv(t, WithUpcall(UpcallFunc(func(ctx context.Context, u *Upcall) error {
				key, auth = u.Key, u.AuthKey
				h := u.Helper
				if err := addWatch(s.lookup(u.Key), q, 5); err != nil {
					t.Errorf("watch the key under construction: %v", err)
				}
				if err := h.WatchKey(u.AuthKey, q, 6); err != nil {
					t.Errorf("watch the auth key: %v", err)
				}
				if _, err := h.AssumeAuthority(u.Key); err != nil {
					t.Errorf("assume authority: %v", err)
				}
				return tc.answer(u, h)
			})))
			s = e.s
			c := e.caller(1000, 1000)
			sess := must(c.GetKeyringID(SessionKeyring, false))(t)
			if err := c.WatchKey(SessionKeyring, q, 1); err != nil {
				t.Fatal(err)
			}
			_, _ = c.RequestKey("user", "k", []byte("x"), 0)
			want := []Notification{
				// Construction links the uninstantiated key at once.
				{Kind: NotifyLinked, Key: sess, Aux: int32(key), WatchID: 1},
				{Kind: NotifyInstantiated, Key: key, Aux: tc.aux, WatchID: 5},
			}
			if tc.name != "no answer" {
				// A used authorisation key is invalidated.
				want = append(want, Notification{Kind: NotifyInvalidated, Key: auth, WatchID: 6})
			}
			// The service revokes it when the upcall is over, and it is
			// destroyed once the helper's session is: two grace periods.
			want = append(want, Notification{Kind: NotifyRevoked, Key: auth, WatchID: 6})
			e.settle()
			e.settle()
			want = append(want, Notification{Kind: NotifyRemoved, Key: auth, WatchID: 6})
			wantNotes(t, "construction", q, want...)
		})
	}
}

func TestWatchKeyErrors(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	stranger := e.caller(2000, 2000)
	k := must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t)
	unwatched := must(c.AddKey("user", "u", []byte("v"), SessionKeyring))(t)
	q, q2, closed := NewWatchQueue(8), NewWatchQueue(8), NewWatchQueue(8)
	defer q.Close()
	defer q2.Close()
	closed.Close()
	cases := []struct {
		name string
		c    *Caller
		id   Serial
		q    *WatchQueue
		wid  int
		want Errno
	}{
		{"watch id below -1", c, k, q, -2, EINVAL},
		{"watch id above 255", c, k, q, 256, EINVAL},
		{"no queue", c, k, nil, 1, EINVAL},
		{"no such key", c, 0x3fffffff, q, 1, ENOKEY},
		{"no view permission", stranger, k, q, 1, EACCES},
		{"remove a watch never set", c, k, q, -1, EBADSLT},
		{"watch", c, k, q, 0, 0},
		{"watch again with another id", c, k, q, 9, EBUSY},
		{"watch again with the same id", c, k, q, 0, EBUSY},
		{"watch from another queue", c, k, q2, 255, 0},
		{"watch a special keyring", c, SessionKeyring, q, 4, 0},
		{"watch on a closed queue", c, k, closed, 1, ENOENT},
		{"remove", c, k, q, -1, 0},
		{"remove again", c, k, q, -1, EBADSLT},
		{"remove from a key not watched", c, unwatched, q, -1, EBADSLT},
		{"watch after removal", c, k, q, 7, 0},
	}
	for _, tc := range cases {
		err := tc.c.WatchKey(tc.id, tc.q, tc.wid)
		if !errnoIs(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The removal posted a removal record to the queue that lost the watch.
	wantNotes(t, "after removal", q, Notification{Kind: NotifyRemoved, Key: k, WatchID: 0})
	wantNotes(t, "other queue", q2)
	// Both queues hear of an update; the removed watch's id is not used.
	if err := c.Update(k, []byte("w")); err != nil {
		t.Fatal(err)
	}
	wantNotes(t, "update", q, Notification{Kind: NotifyUpdated, Key: k, WatchID: 7})
	wantNotes(t, "update, other queue", q2, Notification{Kind: NotifyUpdated, Key: k, WatchID: 255})
}

// TestWatchedKeyDestroyed checks that destroying a watched key posts a
// removal record and drops the watch.
func TestWatchedKeyDestroyed(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	q := NewWatchQueue(8)
	defer q.Close()
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	k := must(c.AddKey("user", "k", []byte("v"), ring))(t)
	if err := c.WatchKey(k, q, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.WatchKey(ring, q, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlink(k, ring); err != nil {
		t.Fatal(err)
	}
	e.settle()
	wantNotes(t, "key destroyed", q,
		Notification{Kind: NotifyUnlinked, Key: ring, Aux: int32(k), WatchID: 4},
		Notification{Kind: NotifyRemoved, Key: k, WatchID: 3})
	if err := c.Unlink(ring, SessionKeyring); err != nil {
		t.Fatal(err)
	}
	e.settle()
	wantNotes(t, "keyring destroyed", q, Notification{Kind: NotifyRemoved, Key: ring, WatchID: 4})
	q.mu.Lock()
	left := len(q.watches)
	q.mu.Unlock()
	if left != 0 {
		t.Fatalf("queue still holds %d watches of destroyed keys", left)
	}
}

func TestWatchQueueBounds(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	q := NewWatchQueue(2)
	k := must(c.AddKey("user", "k", []byte("v"), SessionKeyring))(t)
	if err := c.WatchKey(k, q, 1); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := c.SetTimeout(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := q.Lost(); got != 3 {
		t.Fatalf("Lost() = %d, want 3", got)
	}
	if got := drain(q); len(got) != 2 {
		t.Fatalf("queue held %d notifications, want its size 2", len(got))
	}
	// Room again once the reader caught up.
	if err := c.Update(k, []byte("w")); err != nil {
		t.Fatal(err)
	}
	// Next waits for a notification and returns buffered ones after Close.
	got := make(chan Notification)
	go func() {
		n, _ := q.Next()
		got <- n
		n, _ = q.Next()
		got <- n
	}()
	if n := <-got; n.Kind != NotifyUpdated || n.Key != k {
		t.Fatalf("Next = %+v", n)
	}
	if err := c.Revoke(k); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n.Kind != NotifyRevoked {
		t.Fatalf("Next = %+v", n)
	}
	if err := c.SetTimeout(SessionKeyring, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WatchKey(SessionKeyring, q, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.SetTimeout(SessionKeyring, 0); err != nil {
		t.Fatal(err)
	}
	q.Close()
	q.Close()
	// Events after Close are not queued, and the watches are gone.
	if err := c.SetTimeout(SessionKeyring, 0); err != nil {
		t.Fatal(err)
	}
	if n, ok := q.Next(); !ok || n.Kind != NotifySetAttr || n.WatchID != 2 {
		t.Fatalf("Next after Close = %+v, %v; want the buffered record", n, ok)
	}
	if n, ok := q.Next(); ok {
		t.Fatalf("Next on a drained closed queue = %+v", n)
	}
	sess := e.s.lookup(must(c.GetKeyringID(SessionKeyring, false))(t))
	sess.mu.Lock()
	left := 0
	if x := sess.ext.Load(); x != nil {
		left = len(x.watches)
	}
	sess.mu.Unlock()
	if left != 0 {
		t.Fatalf("key still has %d watches after Close", left)
	}
}

func TestNotifyKindString(t *testing.T) {
	for k, want := range map[NotifyKind]string{
		NotifyInstantiated: "inst", NotifyUpdated: "upd", NotifyLinked: "link", NotifyUnlinked: "unlk",
		NotifyCleared: "clr", NotifyRevoked: "rev", NotifyInvalidated: "inv", NotifySetAttr: "attr",
		NotifyRemoved: "gc", 42: "unknown",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
	}
}

// A move posts what the kernel's key_move posts, in its order: unlinked
// from the source keyring, then linked into the destination, whichever
// keyring's serial is the smaller (the locks are taken in serial order,
// the records are not); a key it displaces in the destination gets no
// record, nor does a key a plain link displaces (the kernel's __key_link
// posts only the keyring's link). keyutils' move_key and link_key check
// exactly these lines of the log of a watch on both keyrings.
func TestMoveNotificationOrder(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	q := NewWatchQueue(64)
	defer q.Close()
	a := must(c.AddKey("keyring", "a", nil, SessionKeyring))(t)
	b := must(c.AddKey("keyring", "b", nil, SessionKeyring))(t)
	lo, hi := min(a, b), max(a, b)
	noErr(t, c.WatchKey(lo, q, 1))
	noErr(t, c.WatchKey(hi, q, 2))
	id := map[Serial]uint8{lo: 1, hi: 2}
	unlk := func(ring, k Serial) Notification {
		return Notification{Key: ring, Kind: NotifyUnlinked, Aux: int32(k), WatchID: id[ring]}
	}
	link := func(ring, k Serial) Notification {
		return Notification{Key: ring, Kind: NotifyLinked, Aux: int32(k), WatchID: id[ring]}
	}
	k := must(c.AddKey("user", "moved", []byte("x"), lo))(t)
	noErr(t, c.WatchKey(k, q, 3))
	drain(q)

	noErr(t, c.Move(k, lo, hi, MoveExcl))
	wantNotes(t, "move to the larger serial", q, unlk(lo, k), link(hi, k))
	noErr(t, c.Move(k, hi, lo, MoveExcl))
	wantNotes(t, "move to the smaller serial", q, unlk(hi, k), link(lo, k))

	// A key of the same name in the destination, linked elsewhere too
	// so that it lives on: an exclusive move fails and posts nothing; a
	// forced one displaces it, and it hears nothing.
	for _, to := range []Serial{hi, lo} {
		from := lo + hi - to
		d := must(c.AddKey("user", "moved", []byte("y"), SessionKeyring))(t)
		noErr(t, c.Link(d, to))
		noErr(t, c.WatchKey(d, q, 4))
		drain(q)
		wantErr(t, "exclusive move onto a key", c.Move(k, from, to, MoveExcl), EEXIST)
		wantNotes(t, "exclusive move onto a key", q)
		noErr(t, c.Move(k, from, to, 0))
		e.settle()
		wantNotes(t, fmt.Sprintf("forced move %d to %d displacing %d", from, to, d), q, unlk(from, k), link(to, k))
		noErr(t, c.WatchKey(d, q, -1))
		noErr(t, c.Unlink(d, SessionKeyring))
		e.settle()
		drain(q)
	}

	// A displaced key that had no other link is destroyed by the
	// collector: its watch gets the removal record, no unlink.
	d := must(c.AddKey("user", "moved", []byte("z"), hi))(t)
	noErr(t, c.WatchKey(d, q, 4))
	drain(q)
	noErr(t, c.Move(k, lo, hi, 0))
	e.settle()
	wantNotes(t, "forced move displacing a key's only link", q,
		unlk(lo, k), link(hi, k), Notification{Key: d, Kind: NotifyRemoved, WatchID: 4})

	// A plain link displacing a key posts the keyring's link only.
	noErr(t, c.Link(k, SessionKeyring)) // so that k outlives its displacement
	d = must(c.AddKey("user", "moved", []byte("w"), lo))(t)
	noErr(t, c.WatchKey(d, q, 4))
	drain(q)
	noErr(t, c.Link(d, hi))
	wantNotes(t, "link displacing a key", q, link(hi, d))
	noErr(t, c.Link(k, hi))
	wantNotes(t, "link displacing it back", q, link(hi, k))
}

// keyctl move takes from the source whatever key holds the moved key's
// place (its type and description), as the kernel's key_move unlinks by
// index key. On the kernel (keyutils 1.6.3):
//
//	f=$(keyctl newring f @s); t=$(keyctl newring t @s)
//	k=$(keyctl add user x 1 @s); k2=$(keyctl add user x 2 $f)
//	keyctl move $k $f $t    → exit 0
//	keyctl rlist $f         → (empty)
//	keyctl rlist $t         → $k
func TestMoveTakesTheSlot(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	q := NewWatchQueue(64)
	defer q.Close()
	f := must(c.AddKey("keyring", "f", nil, SessionKeyring))(t)
	to := must(c.AddKey("keyring", "t", nil, SessionKeyring))(t)
	k := must(c.AddKey("user", "x", []byte("1"), SessionKeyring))(t)
	k2 := must(c.AddKey("user", "x", []byte("2"), f))(t)
	noErr(t, c.WatchKey(f, q, 1))
	noErr(t, c.WatchKey(to, q, 2))
	noErr(t, c.Move(k, f, to, 0))
	if got := listing(e.s.lookup(f).loadRing()); len(got) != 0 {
		t.Fatalf("source still links %v (k2 %d)", got, k2)
	}
	if got := listing(e.s.lookup(to).loadRing()); !slices.Equal(got, []Serial{k}) {
		t.Fatalf("destination links %v, want [%d]", got, k)
	}
	wantNotes(t, "move", q,
		Notification{Key: f, Kind: NotifyUnlinked, Aux: int32(k), WatchID: 1},
		Notification{Key: to, Kind: NotifyLinked, Aux: int32(k), WatchID: 2})
}

// A move is one step, as the kernel's key_move under both keyrings'
// locks: raced by an unlink of the key from the source, either the move
// happens (and the unlink finds nothing) or the unlink does (and the move
// finds nothing); never a move that fails with ENOENT having linked the
// key into the destination, nor a link record without its unlink record.
func TestMoveAtomic(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	from := must(c.AddKey("keyring", "from", nil, SessionKeyring))(t)
	to := must(c.AddKey("keyring", "to", nil, SessionKeyring))(t)
	q := NewWatchQueue(64)
	defer q.Close()
	noErr(t, c.WatchKey(from, q, 1))
	noErr(t, c.WatchKey(to, q, 2))
	k := must(c.AddKey("user", "k", []byte("x"), SessionKeyring))(t) // outlives its links
	for i := range 2000 {
		noErr(t, c.Link(k, from))
		drain(q)
		start := make(chan struct{})
		errs := make(chan error, 1)
		go func() { <-start; errs <- c.Unlink(k, from) }()
		close(start)
		moveErr := c.Move(k, from, to, 0)
		unlinkErr := <-errs
		inTo := slices.Contains(listing(e.s.lookup(to).loadRing()), k)
		notes := drain(q)
		unlk := Notification{Key: from, Kind: NotifyUnlinked, Aux: int32(k), WatchID: 1}
		link := Notification{Key: to, Kind: NotifyLinked, Aux: int32(k), WatchID: 2}
		switch {
		case moveErr == nil && errors.Is(unlinkErr, ENOENT) && inTo &&
			slices.Equal(notes, []Notification{unlk, link}):
		case errors.Is(moveErr, ENOENT) && unlinkErr == nil && !inTo &&
			slices.Equal(notes, []Notification{unlk}):
		default:
			t.Fatalf("round %d: move %v, unlink %v, in destination %v, records %v", i, moveErr, unlinkErr, inTo, notes)
		}
		if inTo {
			noErr(t, c.Unlink(k, to))
		}
	}
}
