//go:build !linux

package server

// followForks: only Linux has the process events connector; elsewhere
// the daemon learns a process's ancestry when it meets it.
func (s *Server) followForks() {}
