//go:build !linux

package main

import (
	"errors"
	"io"
	"net"
	"os"

	"github.com/ukeys/ukeys/server"
)

// Outside Linux there is no systemd: no sockets passed, nobody to notify.

func systemdFiles() ([]*net.UnixListener, *os.File, []int, error) { return nil, nil, nil, nil }

func notify(string) {}

func storeListener(*net.UnixListener) error { return nil }

func freezeToSystemd(*server.Server) error { return errors.New("not under systemd") }

func thawFromSystemd(state *os.File, kept []int, thaw func(io.Reader, []int) error) error {
	return thaw(state, kept)
}
