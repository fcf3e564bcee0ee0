//go:build !linux

package server

import "github.com/ukeys/ukeys/internal/process"

// procTreeTestable reports whether process.Stat can read processes here.
func procTreeTestable() bool { return process.TreeSupported }
