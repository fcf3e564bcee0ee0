package server_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// The caller's section of a hand-over (Config.HandOverExtra and
// TakeOverExtra: the seccomp agent's containers) crosses whole, with its
// descriptors in order, through Freeze and Thaw and through TakeOver;
// each side hears the outcome; and a taker without a hook drops it and
// still takes the rest.
func TestHandOverExtraSection(t *testing.T) {
	section := bytes.Repeat([]byte("the agent's containers\n"), 50000) // over a chunk
	// A descriptor each side can tell: a pipe, whose read end reads what
	// was written into it.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	unix.Write(p[1], []byte("fd"))
	unix.Close(p[1])
	// What the old side hears, from the hand-over's goroutine.
	heard := make(chan bool, 4)
	give := func(w io.Writer) ([]int, func(bool), error) {
		_, err := w.Write(section)
		return []int{p[0]}, func(ok bool) { heard <- ok }, err
	}
	var got []byte
	var gotFDs []int
	var started []bool
	take := func(r io.Reader, fds []int) (func(bool), error) {
		b, err := io.ReadAll(r)
		got, gotFDs = b, fds
		return func(serve bool) { started = append(started, serve) }, err
	}

	t.Run("freeze", func(t *testing.T) {
		got, gotFDs, started = nil, nil, nil
		svc := keys.New()
		srv := server.New(svc, server.Config{Logger: quiet, HandOverExtra: give})
		var buf bytes.Buffer
		kept, err := srv.Freeze(&buf)
		if err != nil {
			t.Fatal(err)
		}
		svc.Close()
		if ok := <-heard; !ok {
			t.Fatal("the hook heard that the freeze failed")
		}
		if len(kept) != 1 {
			t.Fatalf("%d descriptors kept, want the section's 1", len(kept))
		}
		res, err := server.Thaw(bytes.NewReader(buf.Bytes()), kept, nil, server.Config{Logger: quiet, TakeOverExtra: take})
		if err != nil {
			t.Fatal(err)
		}
		defer res.Service.Close()
		defer res.Server.Shutdown(t.Context())
		if !bytes.Equal(got, section) {
			t.Fatalf("the section came back with %d bytes, want %d", len(got), len(section))
		}
		if len(gotFDs) != 1 || len(started) != 1 || !started[0] {
			t.Fatalf("descriptors %v, started %v", gotFDs, started)
		}
		b := make([]byte, 8)
		n, _ := unix.Read(gotFDs[0], b)
		unix.Close(gotFDs[0])
		if string(b[:n]) != "fd" {
			t.Fatalf("the descriptor read %q, want the pipe's", b[:n])
		}

		// A daemon without the hook takes the rest, and drops the
		// section.
		svc2 := keys.New()
		defer svc2.Close()
		buf.Reset()
		kept, err = server.New(svc2, server.Config{Logger: quiet, HandOverExtra: give}).Freeze(&buf)
		if err != nil {
			t.Fatal(err)
		}
		res2, err := server.Thaw(bytes.NewReader(buf.Bytes()), kept, nil, server.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		<-heard
		res2.Server.Shutdown(t.Context())
		res2.Service.Close()
	})

	t.Run("takeover", func(t *testing.T) {
		got, gotFDs, started = nil, nil, nil
		path := filepath.Join(t.TempDir(), "ukeyd.sock")
		svc := keys.New()
		srv := server.New(svc, server.Config{Logger: quiet, HandOverExtra: give})
		ln, err := server.Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		res, err := server.TakeOver(path, nil, server.Config{Logger: quiet, TakeOverExtra: take})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, server.ErrHandedOver) {
			t.Fatalf("the old daemon's Serve: %v", err)
		}
		svc.Close()
		defer res.Service.Close()
		defer res.Server.Shutdown(t.Context())
		for _, l := range res.Listeners {
			defer l.Close()
		}
		if !bytes.Equal(got, section) || len(gotFDs) != 1 || len(started) != 1 || !started[0] {
			t.Fatalf("section %d bytes (want %d), descriptors %v, started %v", len(got), len(section), gotFDs, started)
		}
		unix.Close(gotFDs[0])
		if ok := <-heard; !ok {
			t.Fatal("the old side heard that the hand-over failed")
		}
	})

	t.Run("refused", func(t *testing.T) {
		// A taker that fails to read the section: the old side hears
		// it, and serves on.
		got, gotFDs, started = nil, nil, nil
		path := filepath.Join(t.TempDir(), "ukeyd.sock")
		svc := keys.New()
		defer svc.Close()
		srv := server.New(svc, server.Config{Logger: quiet, HandOverExtra: give})
		ln, err := server.Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() { srv.Shutdown(t.Context()); <-served }()
		_, err = server.TakeOver(path, nil, server.Config{Logger: quiet, TakeOverExtra: func(r io.Reader, fds []int) (func(bool), error) {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, os.ErrInvalid
		}})
		if err == nil {
			t.Fatal("took over with a section it could not read")
		}
		if ok := <-heard; ok {
			t.Fatal("the old side heard that the hand-over happened")
		}
	})
}
