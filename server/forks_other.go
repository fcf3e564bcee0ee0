//go:build !linux

package server

import "os"

// subscribeForks: only Linux has the process events connector; elsewhere
// the daemon learns a process's ancestry when it meets it.
func (s *Server) subscribeForks(bool) *os.File { return nil }

// readForks: nothing is ever subscribed here.
func (s *Server) readForks(*os.File) { s.watchers.Done() }

// syncForks: nothing to apply here.
func (s *Server) syncForks() {}
