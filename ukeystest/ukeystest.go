package ukeystest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// ShutdownTimeout bounds how long a daemon's cleanup waits for its
// server to shut down.
const ShutdownTimeout = 20 * time.Second

// Daemon is a [keys.Service] served on a Unix socket for the length of a
// test.
type Daemon struct {
	// Service is the key retention model the daemon serves.
	Service *keys.Service
	// Server serves Service on Socket.
	Server *server.Server
	// Socket is the path of the daemon's socket.
	Socket string
	// Dir is the directory Socket is in (or below, with WithDirMode).
	Dir string

	done chan error
}

// Option configures a [Daemon].
type Option func(*options)

type options struct {
	keys     []keys.Option
	cfg      server.Config
	helper   []string
	runner   string
	tunables *keys.Tunables
	dirMode  os.FileMode
	socket   string
}

// WithKeys adds options for the daemon's [keys.Service].
func WithKeys(opts ...keys.Option) Option {
	return func(o *options) { o.keys = append(o.keys, opts...) }
}

// WithConfig sets the server's configuration. A nil Logger discards the
// logs; a request-key helper given with [WithHelper] replaces cfg.Helper.
func WithConfig(cfg server.Config) Option {
	return func(o *options) { o.cfg = cfg }
}

// WithHelper makes path, run with args (and then the kernel's seven
// arguments), the daemon's request-key helper: the Service is given a
// *[server.Helper] ([keys.WithUpcall]) and the Server the same one
// ([server.Config.Helper]).
func WithHelper(path string, args ...string) Option {
	return func(o *options) { o.helper = append([]string{path}, args...) }
}

// WithHelperIntercepted runs the helper of [WithHelper] under
// interception by runner, a ukeyctl ([server.Helper.Intercept]).
func WithHelperIntercepted(runner string) Option {
	return func(o *options) { o.runner = runner }
}

// WithTunables replaces the Service's tunables ([keys.Service.SetTunables]).
func WithTunables(t keys.Tunables) Option {
	return func(o *options) { o.tunables = &t }
}

// WithDirMode puts the socket in a fresh directory of the given mode
// outside the test's own temporary directory (which only its uid can
// reach), so that clients running as other uids can reach it when mode
// lets them. The socket is Dir/run/ukeyd.sock; [server.Listen] makes "run".
func WithDirMode(mode os.FileMode) Option {
	return func(o *options) { o.dirMode = mode }
}

// WithSocket serves on path, whose directory [server.Listen] makes if
// missing and the caller removes.
func WithSocket(path string) Option {
	return func(o *options) { o.socket = path }
}

// NewDaemon starts a daemon that serves until the test ends.
func NewDaemon(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d := &Daemon{done: make(chan error, 1)}
	switch {
	case o.socket != "":
		d.Socket, d.Dir = o.socket, filepath.Dir(o.socket)
	case o.dirMode != 0:
		dir, err := os.MkdirTemp("", "ukeystest-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, o.dirMode); err != nil {
			t.Fatal(err)
		}
		d.Dir, d.Socket = dir, filepath.Join(dir, "run", "ukeyd.sock")
	default:
		d.Dir = t.TempDir()
		d.Socket = filepath.Join(d.Dir, "ukeyd.sock")
	}
	cfg := o.cfg
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	kopts := o.keys
	if o.helper != nil {
		h := &server.Helper{Path: o.helper[0], Args: o.helper[1:], Socket: d.Socket, Intercept: o.runner}
		kopts = append(kopts[:len(kopts):len(kopts)], keys.WithUpcall(h))
		cfg.Helper = h
	}
	d.Service = keys.New(kopts...)
	if o.tunables != nil {
		if err := d.Service.SetTunables(*o.tunables); err != nil {
			d.Service.Close()
			t.Fatal(err)
		}
	}
	d.Server = server.New(d.Service, cfg)
	ln, err := server.Listen(d.Socket)
	if err != nil {
		d.Service.Close()
		t.Fatal(err)
	}
	go func() { d.done <- d.Server.Serve(ln) }()
	t.Cleanup(d.close(t))
	return d
}

// close returns the cleanup that stops d.
func (d *Daemon) close(t testing.TB) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := d.Server.Shutdown(ctx); err != nil {
			t.Errorf("ukeystest: shutdown: %v", err)
		}
		if err := <-d.done; !errors.Is(err, server.ErrClosed) {
			t.Errorf("ukeystest: Serve returned %v", err)
		}
		d.Service.Close()
		if _, err := os.Lstat(d.Socket); !os.IsNotExist(err) {
			t.Errorf("ukeystest: socket left behind after shutdown: %v", err)
		}
	}
}

// Dial connects a client to d, closed when the test ends (before d
// stops).
func (d *Daemon) Dial(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.Dial(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
