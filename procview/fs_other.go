//go:build !linux

package procview

import (
	"errors"
	"io"
	"log/slog"
)

// Config says where the files find a reader's key namespace (see the
// Linux build).
type Config struct {
	Lookup func(pid int) (Namespace, bool)
	Host   *Namespace
	Logger *slog.Logger
}

// Server is the files mounted in a directory.
type Server struct{}

// Mount fails: the files need Linux's FUSE and /proc.
func Mount(dir string, cfg Config) (*Server, error) {
	return nil, errors.New("the /proc files need Linux")
}

// Dir is the directory the files are mounted in.
func (s *Server) Dir() string { return "" }

// Close does nothing.
func (s *Server) Close() error { return nil }

// HandOver fails: there are no files to hand over.
func (s *Server) HandOver(w io.Writer) (fd int, done func(handedOver bool), err error) {
	return -1, nil, errors.New("the /proc files need Linux")
}

// TakeOver fails: the /proc files need Linux.
func TakeOver(r io.Reader, fd int) (*Server, func(cfg *Config), error) {
	return nil, nil, errors.New("the /proc files need Linux")
}

// Detach does nothing: there are no files.
func Detach(dir string) {}
