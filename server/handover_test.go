package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// oldDaemon starts a daemon on path in this process, as the one to be
// taken over from.
func oldDaemon(t *testing.T, path string) (*keys.Service, *server.Server, chan error) {
	t.Helper()
	svc := keys.New()
	srv := server.New(svc, server.Config{Logger: quiet})
	ln, err := server.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return svc, srv, served
}

// A daemon takes over from another while clients read, add and search in
// a loop on their open connections: no operation fails, every key and
// the session are there afterwards, the old daemon's serving ends with
// ErrHandedOver and its goroutines with it (goleak, in TestMain), and
// no descriptor is left open on either side once both are done.
func TestHandOverUnderLoad(t *testing.T) {
	fds0 := openFDs(t)
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)

	setup, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := setup.JoinSessionKeyring(nil)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := setup.AddKey("user", "shared", []byte("before"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = byte(i)
	}
	bigID, err := setup.AddKey("big_key", "big", big, keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}

	// Clients in a loop, each on a connection of its own, some
	// pipelining: add a key, read it back, search for the shared one.
	const workers = 8
	var stop atomic.Bool
	var ops, failures atomic.Int64
	var mu sync.Mutex
	var firstErr error
	added := make([][]keys.Serial, workers)
	var wg sync.WaitGroup
	for w := range workers {
		var opts []client.Option
		if w%2 == 1 {
			opts = append(opts, client.WithPipelining())
		}
		c, err := client.Dial(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			fail := func(err error) {
				failures.Add(1)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			for i := 0; !stop.Load(); i++ {
				id, err := c.AddKey("user", fmt.Sprintf("w%d-%d", w, i), []byte(fmt.Sprint(i)), keys.SessionKeyring)
				if err != nil {
					fail(fmt.Errorf("add: %w", err))
					return
				}
				added[w] = append(added[w], id)
				if b, err := c.Read(id); err != nil || string(b) != fmt.Sprint(i) {
					fail(fmt.Errorf("read %d: %q %v", id, b, err))
					return
				}
				if got, err := c.Search(keys.SessionKeyring, "user", "shared", 0); err != nil || got != shared {
					fail(fmt.Errorf("search: %d %v", got, err))
					return
				}
				ops.Add(3)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	before := ops.Load()

	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatal(err)
	}
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	select {
	case <-oldSrv.HandedOver():
	case <-time.After(10 * time.Second):
		t.Fatal("the old daemon did not hand over")
	}
	if err := <-oldServed; !errors.Is(err, server.ErrHandedOver) {
		t.Errorf("the old daemon's Serve: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d operations failed across the hand-over; the first: %v", failures.Load(), firstErr)
	}
	if ops.Load() <= before {
		t.Fatalf("no operation after the hand-over (%d before, %d in all)", before, ops.Load())
	}
	t.Logf("%d operations, %d of them after the hand-over began; %d connections and %d processes handed over",
		ops.Load(), ops.Load()-before, res.Conns, res.Procs)

	// Everything is there, on the connection opened before the hand-over
	// and on a new one.
	after, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{setup, after} {
		if got, err := c.GetKeyringID(keys.SessionKeyring, false); err != nil || got != sess {
			t.Errorf("the session after the hand-over: %d %v, want %d", got, err, sess)
		}
		if b, err := c.Read(bigID); err != nil || len(b) != len(big) || b[12345] != big[12345] {
			t.Errorf("the big key after the hand-over: %d bytes, %v", len(b), err)
		}
		for w := range added {
			for _, id := range added[w] {
				if _, err := c.Describe(id); err != nil {
					t.Fatalf("key %d after the hand-over: %v", id, err)
				}
			}
		}
	}
	after.Close()
	setup.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := res.Server.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	if err := <-newServed; !errors.Is(err, server.ErrClosed) {
		t.Errorf("the new daemon's Serve: %v", err)
	}
	res.Service.Close()
	// The old daemon released its keys once it had handed them over: its
	// collector wipes them and closes the big key's file.
	if err := oldSvc.WaitGC(ctx); err != nil {
		t.Error(err)
	}
	oldSvc.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after the new daemon's shutdown: %v", err)
	}
	if n := openFDs(t); n > fds0 {
		t.Errorf("%d descriptors open after, %d before", n, fds0)
	}
}

// A daemon that cannot finish taking over leaves the old one serving, as
// if nothing had happened: here the new one asks and then hangs up.
func TestHandOverRefusedLeavesTheOldServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.AddKey("user", "kept", []byte("v"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	// A taker that reads a later state only: the old daemon says no.
	if _, err := server.TakeOverForTest(path, server.TakeoverFault{OlderState: true}); err == nil || !errors.Is(err, server.ErrVersions) {
		t.Fatalf("a taker of an earlier version: %v", err)
	}
	// A taker that dies halfway.
	if _, err := server.TakeOverForTest(path, server.TakeoverFault{HangUpAfterFDs: true}); err == nil {
		t.Fatal("a taker that hangs up halfway took over")
	}
	if b, err := c.Read(id); err != nil || string(b) != "v" {
		t.Fatalf("the old daemon after failed hand-overs: %q %v", b, err)
	}
	c2, err := client.Dial(path)
	if err != nil {
		t.Fatalf("the old daemon accepts no more: %v", err)
	}
	c2.Close()
	c.Close()
	select {
	case <-oldSrv.HandedOver():
		t.Fatal("handed over")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := oldSrv.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	<-oldServed
	oldSvc.Close()
}

// Key watches go with their connections: a notification posted before
// the hand-over and not yet read arrives after it, and so do those of
// later changes; a client waiting for one when the hand-over begins is
// woken (EAGAIN, which the client asks again) and waits on the new
// daemon.
func TestHandOverKeepsWatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	w, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, err := w.AddKey("user", "watched", []byte("1"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WatchKey(id, 7); err != nil {
		t.Fatal(err)
	}
	if err := w.Update(id, []byte("2")); err != nil { // pending across the hand-over
		t.Fatal(err)
	}
	n, err := w.NextNotification()
	if err != nil || n.Key != id || n.Kind != keys.NotifyUpdated || n.WatchID != 7 {
		t.Fatalf("before: %+v %v", n, err)
	}
	// One more, unread when the hand-over happens; and a second
	// connection waiting for a notification meanwhile.
	if err := w.Update(id, []byte("3")); err != nil {
		t.Fatal(err)
	}
	waiter, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if err := waiter.WatchKey(id, 9); err != nil {
		t.Fatal(err)
	}
	got := make(chan keys.Notification, 1)
	go func() {
		n, err := waiter.NextNotification()
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		got <- n
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is waiting
	start := time.Now()
	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the hand-over waited %v for the waiting watcher", d)
	}
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	<-oldServed
	_ = oldSrv
	if n, err := w.NextNotification(); err != nil || n.Key != id || n.Kind != keys.NotifyUpdated || n.WatchID != 7 {
		t.Fatalf("the notification pending at the hand-over: %+v %v", n, err)
	}
	// A change on the new daemon reaches both watchers.
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(id); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, err := w.NextNotification(); err != nil || n.Key != id || n.Kind != keys.NotifyRevoked || n.WatchID != 7 {
		t.Fatalf("a change after the hand-over: %+v %v", n, err)
	}
	select {
	case n := <-got:
		if n.Key != id || n.WatchID != 9 {
			t.Fatalf("the waiter got %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter got nothing")
	}
	w.Close()
	waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	<-newServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}

// A taker that asks and then stalls (it never says it serves) holds the
// parked clients only for the stall bound: then the old daemon serves on,
// and the clients' requests made meanwhile are answered.
func TestHandOverStalledTaker(t *testing.T) {
	defer server.SetHandoverStallTimeout(300 * time.Millisecond)()
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.AddKey("user", "k", []byte("v"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	// The taker: a hello and OpTakeover, then silence.
	taker, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer taker.Close()
	var out sock.Frames
	out.Body(wire.EncodeHello(wire.Version))
	var req wire.Request
	req.Set(wire.OpTakeover, wire.Int(server.HandoverVersion), wire.Int(keys.StateVersion))
	req.Tag = 1
	out.Request(&req)
	if _, err := taker.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // parked now
	start := time.Now()
	b, err := c.Read(id) // waits while parked, then is served by the old daemon
	if err != nil || string(b) != "v" {
		t.Fatalf("a read across a stalled hand-over: %q %v", b, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the read waited %v", d)
	}
	select {
	case <-oldSrv.HandedOver():
		t.Fatal("handed over to a taker that never said it serves")
	default:
	}
	taker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Close()
	oldSrv.Shutdown(ctx)
	<-oldServed
	oldSvc.Close()
}
