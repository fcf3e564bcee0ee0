package server_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// Any request that decodes, of any operation with any arguments, from
// root or from an ordinary uid, is served without a panic; its answer
// encodes within the protocol's limits, carries the request's tag and an
// errno or a result, and never the logon secret the service holds; and
// the keys invariants hold after each.
func FuzzDispatch(f *testing.F) {
	secret := []byte("DISPATCH-FUZZ-SECRET-51be")
	svc := keys.New(keys.WithTunables(func() keys.Tunables {
		t := keys.DefaultTunables()
		t.MaxKeys, t.RootMaxKeys = 2000, 20000
		return t
	}()))
	root := server.NewLocal(svc, keys.Cred{UID: 0, GID: 0, PID: os.Getpid()})
	user := server.NewLocal(svc, keys.Cred{UID: 1000, GID: 100, PID: os.Getpid() + 1})
	f.Cleanup(func() {
		root.Close()
		user.Close()
		svc.Close()
	})
	root.Do(&wire.Request{Op: wire.OpJoinSession})
	root.Do(&wire.Request{Op: wire.OpAddKey, Ints: []int64{int64(keys.SessionKeyring)}, Bufs: [][]byte{[]byte("logon"), []byte("fuzz:secret"), secret}})
	for _, r := range []*wire.Request{
		{Tag: 1, Op: wire.OpAddKey, Ints: []int64{int64(keys.SessionKeyring)}, Bufs: [][]byte{[]byte("user"), []byte("k"), []byte("v")}},
		{Tag: 2, Op: wire.OpSearch, Ints: []int64{int64(keys.SessionKeyring), 0}, Bufs: [][]byte{[]byte("logon"), []byte("fuzz:secret")}},
		{Tag: 3, Op: wire.OpRead, Ints: []int64{int64(keys.SessionKeyring)}},
		{Tag: 4, Op: wire.OpDescribe, Ints: []int64{int64(keys.UserKeyring)}},
		{Tag: 5, Op: wire.OpRequestKey, Ints: []int64{0}, Bufs: [][]byte{[]byte("user"), []byte("x"), []byte("callout")}},
		{Tag: 6, Op: wire.OpSetPerm, Ints: []int64{int64(keys.SessionKeyring), 0x3f3f3f3f}},
		{Tag: 7, Op: wire.OpMove, Ints: []int64{1, -3, -4, 1}},
		{Tag: 8, Op: wire.OpRestrictKeyring, Ints: []int64{-3}, Bufs: [][]byte{[]byte("user"), nil}},
		{Tag: 9, Op: wire.OpSessionAttach, Bufs: [][]byte{[]byte("00000000000000000000000000000000")}},
		{Tag: 10, Op: wire.OpGetPersistent, Ints: []int64{-1, -3}},
		{Tag: 11, Op: wire.OpReject, Ints: []int64{1, 5, 128, 0}},
		{Tag: 12, Op: wire.Op(60000), Ints: []int64{1}},
	} {
		body, err := wire.AppendRequest(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, false)
		f.Add(body, true)
	}
	// And one well-formed request of every operation in the table.
	for s := range wire.Specs() {
		body, err := wire.AppendRequest(nil, sampleRequest(f, s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, false)
		f.Add(body, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, asUser bool) {
		req, err := wire.DecodeRequest(body)
		if err != nil {
			return
		}
		switch req.Op {
		case wire.OpWatchNext, wire.OpSysctlSet:
			return // one waits seconds by design; the other would starve later runs
		}
		h := root
		if asUser {
			h = user
		}
		resp := h.Do(req)
		if resp.Tag != req.Tag {
			t.Fatalf("tag %d answered with %d", req.Tag, resp.Tag)
		}
		out, err := wire.AppendResponse(nil, resp)
		if err != nil {
			t.Fatalf("%v: the answer does not encode: %v", req.Op, err)
		}
		if resp.Errno != 0 && (len(resp.Ints) != 0 || len(resp.Bufs) != 0) {
			t.Fatalf("%v: errno %d with results", req.Op, resp.Errno)
		}
		if bytes.Contains(out, secret) {
			t.Fatalf("%v (%x) answered with the logon payload", req.Op, body)
		}
		// Check is exact once destructions have run.
		if err := svc.WaitGC(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := svc.Check(); err != nil {
			t.Fatalf("after %v (%x): %v", req.Op, body, err)
		}
	})
}
