//go:build !linux

package main

import (
	"errors"
	"io"
	"net"

	"github.com/ukeys/ukeys/server"
)

// Outside Linux there is no systemd: no sockets passed, nobody to notify.

// keptState is what a daemon stopped for a restart keeps: nothing here.
type keptState struct{}

func systemdFiles() ([]*net.UnixListener, *keptState, []int, error) { return nil, nil, nil, nil }

func notify(string) {}

func storeListener(*net.UnixListener) error { return nil }

func freezeToSystemd(*server.Server) error { return errors.New("not under systemd") }

func thawFromSystemd(*keptState, []int, func(io.Reader, []int) error) (bool, error) {
	return false, errors.New("not under systemd")
}
